/**
 * A subscription renewal undone by a chain reorganisation after the facilitator recorded its receipt, on
 * a devnet running Circle's USDC. The facilitator notices that the `collectMany` left the chain, sends
 * the same transaction again, and the renewal ends collected exactly once — or, when the replacing
 * chain took the subscriber's allowance away, refused with its reason — and the index, the event log
 * and the provider's analytics say what the chain says, nothing counted twice.
 */
import { type Address, encodeFunctionData, erc20Abi, type Hash, toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getSubscription } from "../src/chain/actions/subscriptions/getSubscription.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { queryAnalyticsSummary } from "../src/facilitator/analytics/queryAnalytics.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import {
  createRenewalKeeper,
  type RenewalKeeper,
} from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import {
  createSubscriptionIndexer,
  type SubscriptionIndexer,
} from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { statusOf } from "../src/schemes/subscription/facilitator/subscriptionRecords.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n;

describe("facilitator after a reorganisation undid a renewal", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let client: FacilitatorClient;
  let indexer: SubscriptionIndexer;
  let keeper: RenewalKeeper;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 6 });
    tf = await startTestFacilitator(devnet, { settlement: { reorgCheckIntervalMs: 50 } });
    client = createFacilitatorClient({ url: tf.url, fetch });
    indexer = createSubscriptionIndexer(tf.facilitator.context);
    keeper = createRenewalKeeper(tf.facilitator.context, { indexer, retryAfterSeconds: DAY });
  }, 60_000);
  afterAll(async () => {
    await tf?.stop();
    await devnet?.stop();
  });

  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const receiptOrNull = (hash: Hash) => devnet.publicClient.getTransactionReceipt({ hash }).catch(() => null);
  /** What the facilitator's event log holds for the subscription (analytics and webhooks read it). */
  const eventsOf = async (type: string, subscriptionId: string) =>
    (
      await tf.store.query<{ data: { subscriptionId: string } }>("SELECT data FROM events WHERE type = $1", [
        type,
      ])
    ).filter((e) => e.data.subscriptionId === subscriptionId);
  const indexed = async (subscriptionId: string) =>
    (
      await tf.store.query<{
        status: string;
        current_period_end: string;
        renewal_failure_code: string | null;
      }>(
        "SELECT status, current_period_end, renewal_failure_code FROM subscriptions WHERE subscription_id = $1",
        [subscriptionId],
      )
    )[0];
  const subscriptionCharges = async (provider: Address) =>
    (
      await queryAnalyticsSummary(tf.store, {
        provider: provider.toLowerCase(),
        from: new Date(Date.now() - DAY * 1000),
        to: new Date(Date.now() + DAY * 1000),
      })
    ).schemes.subscription;

  /** A plan of `provider`'s, one subscriber, and its renewal collected by the keeper and indexed. */
  async function renewed(provider: DevnetAccount, subscriber: DevnetAccount) {
    const plan = await createPlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: PRICE,
      interval: BigInt(INTERVAL),
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash: plan }));
    await devnet.fund(subscriber.address, { usd: 3n * PRICE });
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber.account, {
      planId,
      maxOverage: 0n,
      approval: 2n * PRICE,
      exactApproval: true,
    });
    await devnet.advanceTime(INTERVAL + 60);
    const before = {
      subscriber: await balanceOf(subscriber.address),
      provider: await balanceOf(provider.address),
    };
    const run = await keeper.runOnce();
    expect(run.renewed).toContain(subscriptionId);
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: run.transactions.at(-1)! });
    // Recorded: indexed as renewed, announced, and counted by analytics.
    expect((await indexed(subscriptionId))?.status).toBe("Active");
    expect(await eventsOf("subscription.renewed", subscriptionId)).toHaveLength(1);
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - PRICE);
    const paidToProvider = (await balanceOf(provider.address)) - before.provider;
    expect((await subscriptionCharges(provider.address)).count).toBe(2);
    return { subscriptionId, receipt, before, paidToProvider };
  }

  /** The index equals the chain for the subscription, once the watch re-sent the renewal and it was mined. */
  async function settledAgain(subscriptionId: string, undone: { blockHash: Hash; transactionHash: Hash }) {
    await vi.waitFor(
      async () => {
        const receipt = await receiptOrNull(undone.transactionHash);
        expect(receipt?.status).toBe("success");
        expect(receipt?.blockHash).not.toBe(undone.blockHash);
        await indexer.syncOnce();
        const chain = await getSubscription(devnet.publicClient, {
          manager: devnet.contracts.subscriptionManager,
          subscriptionId: BigInt(subscriptionId),
        });
        const row = await indexed(subscriptionId);
        expect(row?.current_period_end).toBe(chain.currentPeriodEnd.toString());
        expect(row?.status).toBe(statusOf(chain.status));
      },
      { timeout: 20_000, interval: 50 },
    );
  }

  it("collects a renewal again, once, after its block was rolled back", async () => {
    const provider = devnet.accounts[1]!;
    const subscriber = devnet.accounts[3]!;
    const { subscriptionId, receipt, before, paidToProvider } = await renewed(provider, subscriber);
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    await settledAgain(subscriptionId, receipt);

    // Paid once on chain, renewed once in the index, announced and counted once.
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - PRICE);
    expect(await balanceOf(provider.address)).toBe(before.provider + paidToProvider);
    expect((await indexed(subscriptionId))?.status).toBe("Active");
    expect(await eventsOf("subscription.renewed", subscriptionId)).toHaveLength(1);
    expect(await eventsOf("subscription.created", subscriptionId)).toHaveLength(1);
    // A poller that saw the renewal undone sees it restored as often: the sum is one renewal.
    const undone = await eventsOf("event.undone", subscriptionId);
    expect(await eventsOf("event.restored", subscriptionId)).toHaveLength(undone.length);
    const charges = await subscriptionCharges(provider.address);
    expect(charges.count).toBe(2);
    expect(charges.volume).toBe((2n * PRICE).toString());
  }, 60_000);

  it("records a renewal as refused, uncounted, when the replacing chain took the subscriber's allowance away", async () => {
    const provider = devnet.accounts[2]!;
    const subscriber = devnet.accounts[4]!;
    const { subscriptionId, receipt, before } = await renewed(provider, subscriber);
    // The block is replaced by one in which the subscriber revokes the manager's allowance first.
    const revoke = {
      from: subscriber.address,
      to: devnet.contracts.usd,
      data: encodeFunctionData({
        abi: erc20Abi,
        functionName: "approve",
        args: [devnet.contracts.subscriptionManager, 0n],
      }),
      gas: toHex(100_000),
    };
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, [[revoke, 0]]] } as never);
    await settledAgain(subscriptionId, receipt);

    // Not paid; the index says PastDue with the reason; the undone renewal is no charge any more.
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber);
    expect(await balanceOf(provider.address)).toBe(before.provider);
    const row = await indexed(subscriptionId);
    expect(row?.status).toBe("PastDue");
    expect(row?.renewal_failure_code).not.toBeNull();
    expect(await eventsOf("subscription.renewal_failed", subscriptionId)).toHaveLength(1);
    expect(await eventsOf("subscription.created", subscriptionId)).toHaveLength(1);
    // The renewal already announced is taken back by an event of its own, and not restored.
    const [renewedEvent] = await tf.store.query<{ id: string }>(
      "SELECT id FROM events WHERE type = 'subscription.renewed' AND data ->> 'subscriptionId' = $1",
      [subscriptionId],
    );
    expect(await eventsOf("event.undone", subscriptionId)).toEqual([
      expect.objectContaining({
        data: expect.objectContaining({
          eventId: Number(renewedEvent!.id),
          eventType: "subscription.renewed",
          provider: expect.stringMatching(new RegExp(provider.address, "i")),
        }),
      }),
    ]);
    expect(await eventsOf("event.restored", subscriptionId)).toHaveLength(0);
    const charges = await subscriptionCharges(provider.address);
    expect(charges.count).toBe(1);
    expect(charges.volume).toBe(PRICE.toString());
  }, 60_000);
});
