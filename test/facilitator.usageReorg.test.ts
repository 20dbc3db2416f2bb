/**
 * A metered deduction undone by a chain reorganisation after the facilitator recorded its receipt, on a
 * devnet running Circle's USDC. The facilitator notices that the `deductAllowanceMany` left the chain,
 * sends the same transaction again, and the usage record ends settled exactly once — or, when the
 * replacing chain cancelled the subscription, failed with its reason — and the usage records, the event
 * log and the provider's analytics say what the chain says, nothing counted twice.
 */
import { type Address, encodeFunctionData, type Hash, type Hex, parseGwei, toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { subscriptionManagerAbi } from "../src/chain/contracts/artifacts/SubscriptionManager.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { queryAnalyticsSummary } from "../src/facilitator/analytics/queryAnalytics.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import {
  createSubscriptionIndexer,
  type SubscriptionIndexer,
} from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import {
  createUsageSettler,
  type UsageSettler,
} from "../src/schemes/subscription/facilitator/usage/usageSettler.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { registerTestProvider } from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const AMOUNT = 7_000n;

describe("facilitator after a reorganisation undid a metered deduction", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let store: Store;
  let indexer: SubscriptionIndexer;
  let settler: UsageSettler;

  /** A facilitator over the file's store (a restart keeps the store). */
  async function startFacilitator() {
    tf = await startTestFacilitator(devnet, { store, settlement: { reorgCheckIntervalMs: 50 } });
    indexer = createSubscriptionIndexer(tf.facilitator.context);
    settler = createUsageSettler(tf.facilitator.context);
  }

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 8 });
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    await startFacilitator();
  }, 60_000);
  afterAll(async () => {
    await tf?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const gasKey = () => devnet.accounts[devnet.accounts.length - 1]!.address;
  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const receiptOrNull = (hash: Hash) => devnet.publicClient.getTransactionReceipt({ hash }).catch(() => null);
  const record = async (ref: string) =>
    (
      await tf.store.query<{ status: string; tx_hash: Hash | null; failure_code: string | null }>(
        "SELECT status, tx_hash, failure_code FROM usage_records WHERE ref = $1",
        [ref],
      )
    )[0];
  const deductedEvents = async (ref: string) =>
    (
      await tf.store.query<{ data: { usageRef?: string } }>(
        "SELECT data FROM events WHERE type = 'allowance.deducted'",
      )
    ).filter((e) => e.data.usageRef === ref);
  const meteredCharges = async (provider: Address) =>
    (
      await queryAnalyticsSummary(tf.store, {
        provider: provider.toLowerCase(),
        from: new Date(Date.now() - DAY * 1000),
        to: new Date(Date.now() + DAY * 1000),
      })
    ).schemes.metered;

  /** A metered plan of `provider`'s, one subscriber, and one usage record deducted on chain and recorded. */
  async function deducted(provider: DevnetAccount, subscriber: DevnetAccount, ref: string) {
    const apiKey = await registerTestProvider(tf.url, provider);
    const plan = await createPlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: 1_000_000n,
      interval: 30n * 86_400n,
      includedUnits: 0n,
      overageUnitPrice: 1_000n,
    });
    const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash: plan }));
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await setOperator(devnet.walletClient(provider), {
        manager: devnet.contracts.subscriptionManager,
        operator: gasKey(),
        allowed: true,
      }),
    });
    await devnet.fund(subscriber.address, { usd: 10_000_000n });
    const { subscriptionId } = await subscribeThroughFacilitator(
      createFacilitatorClient({ url: tf.url, fetch }),
      subscriber.account,
      { planId, maxOverage: 1_000_000n, approval: 10_000_000n },
    );
    const before = {
      subscriber: await balanceOf(subscriber.address),
      provider: await balanceOf(provider.address),
    };
    const posted = await fetch(`${tf.url}/usage`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ records: [{ subscriptionId, amount: AMOUNT.toString(), ref }] }),
    });
    expect(posted.status).toBe(202);
    await vi.waitFor(
      async () => {
        await settler.runOnce();
        expect((await record(ref))?.status).toBe("settled");
      },
      { timeout: 20_000, interval: 50 },
    );
    await indexer.syncOnce();
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: (await record(ref))!.tx_hash! });
    // Recorded: deducted on chain, announced, and counted by analytics.
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - AMOUNT);
    const paidToProvider = (await balanceOf(provider.address)) - before.provider;
    expect(await deductedEvents(ref)).toHaveLength(1);
    expect((await meteredCharges(provider.address)).count).toBe(1);
    return { subscriptionId, receipt, before, paidToProvider };
  }

  /** Waits until the record is final again by a transaction on the chain now, outside the undone block. */
  async function recordedAgain(ref: string, undone: { blockHash: Hash; transactionHash: Hash }) {
    await vi.waitFor(
      async () => {
        const receipt = await receiptOrNull(undone.transactionHash);
        expect(receipt?.status).toBe("success");
        expect(receipt?.blockHash).not.toBe(undone.blockHash);
        const row = await record(ref);
        expect(["settled", "failed"]).toContain(row?.status);
        expect(row?.tx_hash).toBe(undone.transactionHash);
        await indexer.syncOnce();
      },
      { timeout: 20_000, interval: 50 },
    );
  }

  it("deducts a usage record again, once, after its block was rolled back", async () => {
    const provider = devnet.accounts[1]!;
    const subscriber = devnet.accounts[3]!;
    const ref = "reorg-rollback";
    const { receipt, before, paidToProvider } = await deducted(provider, subscriber, ref);
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    await recordedAgain(ref, receipt);

    expect((await record(ref))?.status).toBe("settled");
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - AMOUNT);
    expect(await balanceOf(provider.address)).toBe(before.provider + paidToProvider);
    expect(await deductedEvents(ref)).toHaveLength(1);
    const charges = await meteredCharges(provider.address);
    expect(charges.count).toBe(1);
    expect(charges.volume).toBe(AMOUNT.toString());
  }, 60_000);

  it("fails a usage record with its reason, uncounted, when the replacing chain cancelled the subscription", async () => {
    const provider = devnet.accounts[2]!;
    const subscriber = devnet.accounts[4]!;
    const ref = "reorg-cancelled";
    const { subscriptionId, receipt, before } = await deducted(provider, subscriber, ref);
    // The block is replaced by one in which the subscriber cancels first.
    const cancelling = {
      from: subscriber.address,
      to: devnet.contracts.subscriptionManager,
      data: encodeFunctionData({
        abi: subscriptionManagerAbi,
        functionName: "cancel",
        args: [BigInt(subscriptionId)],
      }),
      gas: toHex(200_000),
    };
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, [[cancelling, 0]]] } as never);
    await recordedAgain(ref, receipt);

    const row = await record(ref);
    expect(row?.status).toBe("failed");
    expect(row?.failure_code).toBe("SubscriptionNotActive");
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber);
    expect(await balanceOf(provider.address)).toBe(before.provider);
    const charges = await meteredCharges(provider.address);
    expect(charges.count).toBe(0);
    expect(charges.volume).toBe("0");
  }, 60_000);

  it("notices after a restart a deduction whose block was replaced while the facilitator was down, the same transaction in the new block", async () => {
    const provider = devnet.accounts[5]!;
    const subscriber = devnet.accounts[6]!;
    const ref = "reorg-while-down";
    const { subscriptionId, receipt, before } = await deducted(provider, subscriber, ref);
    const [sent] = await store.query<{ raw_tx: Hex }>("SELECT raw_tx FROM tx_outbox WHERE tx_hash = $1", [
      receipt.transactionHash,
    ]);
    await tf.stop();

    // While it is down, the block is replaced by one at the same height holding the subscriber's cancel
    // and then the very same deduction transaction, which now fails: its receipt is at the recorded
    // height, in another block, with another outcome.
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    await devnet.testClient.setAutomine(false);
    // A higher tip than the deduction's, so the block holds the cancel first (anvil orders by fees).
    await devnet.walletClient(subscriber).writeContract({
      address: devnet.contracts.subscriptionManager,
      abi: subscriptionManagerAbi,
      functionName: "cancel",
      args: [BigInt(subscriptionId)],
      maxPriorityFeePerGas: parseGwei("50"),
      maxFeePerGas: parseGwei("100"),
    });
    await devnet.publicClient.sendRawTransaction({ serializedTransaction: sent!.raw_tx });
    await devnet.testClient.mine({ blocks: 1 });
    await devnet.testClient.setAutomine(true);
    const replaced = await devnet.publicClient.getTransactionReceipt({ hash: receipt.transactionHash });
    expect(replaced.blockNumber).toBe(receipt.blockNumber);
    expect(replaced.blockHash).not.toBe(receipt.blockHash);

    await startFacilitator();
    await vi.waitFor(async () => expect((await record(ref))?.status).toBe("failed"), {
      timeout: 20_000,
      interval: 50,
    });
    expect((await record(ref))?.failure_code).toBe("SubscriptionNotActive");
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber);
    await indexer.syncOnce();
    const charges = await meteredCharges(provider.address);
    expect(charges.count).toBe(0);
  }, 60_000);
});
