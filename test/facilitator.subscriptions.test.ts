/**
 * Subscriptions through a real facilitator on a real devnet: gasless subscribe, relayed lifecycle
 * calls, the indexer's tables and event log, and the renewal keeper driven by chain time.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { deprecatePlan } from "../src/chain/actions/subscriptions/deprecatePlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { transferToken } from "../src/chain/actions/usd/transferToken.ts";
import { subscriptionManagerAbi } from "../src/chain/contracts/artifacts/SubscriptionManager.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import { isTollgateError, type TollgateError } from "../src/protocol/errors.ts";
import { EventFeedResponseSchema, type FeedEvent } from "../src/protocol/subscriptions.ts";
import {
  changeSubscriptionThroughFacilitator,
  getSubscriberInfo,
  getSubscriptionInfo,
  relaySubscribe,
  signSubscribeRequest,
  signSubscriptionActionRequest,
  subscribeThroughFacilitator,
} from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { createSubscriptionService } from "../src/schemes/subscription/facilitator/subscriptionService.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let client: FacilitatorClient;
let provider: DevnetAccount;
/** The provider's API key: the event feed is per provider and needs it. */
let providerAuth: Record<string, string>;
let planId: bigint;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  client = createFacilitatorClient({ url: tf.url, fetch });
  provider = devnet.accounts[1]!;
  const { apiKey } = await registerProvider(client, provider.account);
  providerAuth = { authorization: `Bearer ${apiKey}` };
  planId = await newPlan();
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

async function newPlan(price = PRICE): Promise<bigint> {
  const hash = await createPlan(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: price,
    interval: BigInt(INTERVAL),
    includedUnits: 1000n,
    overageUnitPrice: 1000n,
  });
  return getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
}

/** A fresh key holding test USD and no ETH at all: subscribers never need gas. */
async function subscriberWith(usd: bigint) {
  const account = privateKeyToAccount(generatePrivateKey());
  if (usd > 0n) await devnet.fund(account.address, { usd });
  return account;
}

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function refusal(promise: Promise<unknown>): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (isTollgateError(error)) return error;
    throw error;
  }
  throw new Error("expected a refusal");
}

async function events(query: string): Promise<FeedEvent[]> {
  const response = await fetch(`${tf.url}/events?${query}`, { headers: providerAuth });
  expect(response.status).toBe(200);
  return EventFeedResponseSchema.parse(await response.json()).events;
}

/**
 * Polls until `check` returns a value, for at most `timeoutMs`. The background indexer polls the chain
 * every second, and the feed promises an event only "a moment after it committed": it holds an event
 * back while any older transaction on the database is still running (docs/subscriptions.md), so a
 * feed read waits for the event instead of assuming it is already served.
 */
async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Every event of the provider's in the store, counted in the table, not through the feed: the feed
 * holds back events while any older transaction on the database server is running, and on a shared
 * PostgreSQL server (CI) that can be another test file's.
 */
async function storedEventCount(): Promise<number> {
  const rows = await tf.store.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM events WHERE lower(data ->> 'provider') = $1 OR lower(data ->> 'payTo') = $1",
    [provider.address.toLowerCase()],
  );
  return rows[0]!.n;
}

/** The feed's whole log for the provider, once it serves every stored event (nothing held back). */
async function settledFeed(): Promise<FeedEvent[]> {
  return eventually(async () => {
    const all = await events("limit=1000");
    return all.length === (await storedEventCount()) ? all : undefined;
  });
}

/** The feed's events (`query`) of one subscription, once one of type `until` is among them. */
function subscriptionEvents(query: string, subscriptionId: string, until: string): Promise<FeedEvent[]> {
  return eventually(async () => {
    const mine = (await events(query)).filter((e) => e.data.subscriptionId === subscriptionId);
    return mine.some((e) => e.type === until) ? mine : undefined;
  });
}

function keeper() {
  const ctx = tf.facilitator.context;
  return createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx), retryAfterSeconds: DAY });
}

describe("gasless subscribe", () => {
  it("subscribes an account with no ETH, charging exactly the first period", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const before = {
      subscriber: await balanceOf(subscriber.address),
      provider: await balanceOf(provider.address),
    };
    const result = await subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 2_000_000n });
    expect(result.permitTransaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(result.subscription).toMatchObject({
      status: "Active",
      subscriber: subscriber.address,
      provider: provider.address,
      planId: planId.toString(),
      maxOverage: "2000000",
      amount: PRICE.toString(),
    });
    expect(result.subscription.currentPeriodEnd - result.subscription.periodStart).toBe(INTERVAL);
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - PRICE);
    expect(await balanceOf(provider.address)).toBe(before.provider + PRICE);
    expect(await devnet.publicClient.getBalance({ address: subscriber.address })).toBe(0n);

    // The relay answered after indexing, so the index and the event log already have it.
    const info = await getSubscriberInfo(client, subscriber.address);
    expect(info.subscriptions).toEqual([
      expect.objectContaining({
        subscriptionId: result.subscriptionId,
        status: "Active",
        provider: provider.address,
      }),
    ]);
    const created = await subscriptionEvents(
      "types=subscription.created",
      result.subscriptionId,
      "subscription.created",
    );
    expect(created).toHaveLength(1);
    expect(created[0]?.data).toMatchObject({ provider: provider.address, amount: PRICE.toString() });
  });

  it("returns the first result when the same signed request is relayed again", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const info = await getSubscriberInfo(client, subscriber.address, { token: devnet.contracts.usd });
    const deadline = BigInt(info.chainTime + 600);
    const request = await signSubscribeRequest(subscriber, {
      chainId: devnet.chain.id,
      manager: devnet.contracts.subscriptionManager,
      planId,
      maxOverage: 0n,
      nonce: BigInt(info.intentNonce),
      deadline,
      permit: {
        domain: {
          name: devnet.token.name,
          version: devnet.token.version,
          chainId: devnet.chain.id,
          verifyingContract: devnet.contracts.usd,
        },
        value: PRICE * 3n,
        nonce: BigInt(info.token?.permitNonce ?? "0"),
        deadline,
      },
    });
    const before = await balanceOf(subscriber.address);
    const [a, b] = await Promise.all([relaySubscribe(client, request), relaySubscribe(client, request)]);
    const c = await relaySubscribe(client, request);
    expect(b.subscriptionId).toBe(a.subscriptionId);
    expect(c.subscriptionId).toBe(a.subscriptionId);
    expect(c.transaction).toBe(a.transaction);
    expect(await balanceOf(subscriber.address)).toBe(before - PRICE);
  });

  it("subscribes without a permit when the manager is already approved", async () => {
    const subscriber = await subscriberWith(40_000_000n);
    await subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 0n, approval: PRICE * 4n });
    const second = await subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 0n });
    expect(second.permitTransaction).toBeUndefined();
    expect(second.subscription.status).toBe("Active");
  });

  it("refuses a deprecated plan with 410 PlanDeprecated naming the successor", async () => {
    const old = await newPlan();
    const successor = await newPlan(PRICE * 2n);
    const hash = await deprecatePlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      planId: old,
      successorPlanId: successor,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    const subscriber = await subscriberWith(20_000_000n);
    const error = await refusal(
      subscribeThroughFacilitator(client, subscriber, { planId: old, maxOverage: 0n }),
    );
    expect(error.code).toBe("PlanDeprecated");
    expect(error.status).toBe(410);
    expect(error.details).toMatchObject({ successorPlanId: successor.toString() });
    const feed = await eventually(async () => {
      const found = (await events("types=plan.deprecated")).find((e) => e.data.planId === old.toString());
      return found;
    });
    expect(feed.data).toMatchObject({ successorPlanId: successor.toString(), provider: provider.address });
  });

  it("refuses a subscriber who cannot pay with InsufficientFunds, before sending anything", async () => {
    const subscriber = await subscriberWith(1_000_000n);
    const error = await refusal(subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 0n }));
    expect(error.code).toBe("InsufficientFunds");
    expect(await balanceOf(subscriber.address)).toBe(1_000_000n);
  });

  it("refuses an unknown plan, an expired intent and a signature by another key", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    expect(
      (await refusal(subscribeThroughFacilitator(client, subscriber, { planId: 9999n, maxOverage: 0n })))
        .code,
    ).toBe("NotFound");
    const info = await getSubscriberInfo(client, subscriber.address, { token: devnet.contracts.usd });
    const sign = (signer = subscriber, deadline = BigInt(info.chainTime + 600)) =>
      signSubscribeRequest(signer, {
        chainId: devnet.chain.id,
        manager: devnet.contracts.subscriptionManager,
        planId,
        maxOverage: 0n,
        nonce: BigInt(info.intentNonce),
        deadline,
        permit: {
          domain: {
            name: devnet.token.name,
            version: devnet.token.version,
            chainId: devnet.chain.id,
            verifyingContract: devnet.contracts.usd,
          },
          value: PRICE,
          nonce: 0n,
          deadline,
        },
      });
    const expired = await sign(subscriber, BigInt(info.chainTime - 1));
    expect((await refusal(relaySubscribe(client, expired))).code).toBe("AuthorizationExpired");

    const stranger = privateKeyToAccount(generatePrivateKey());
    const forged = { ...(await sign(stranger)), subscriber: subscriber.address };
    const error = await refusal(relaySubscribe(client, forged));
    expect(error.code).toBe("InvalidSignature");
    expect(error.status).toBe(422);
    // The permit was not spent on a refused intent.
    const after = await getSubscriberInfo(client, subscriber.address, { token: devnet.contracts.usd });
    expect(after.token?.permitNonce).toBe("0");
  });
});

describe("relayed lifecycle", () => {
  it("pauses (the paid period keeps running), resumes in the same period, sets the overage cap and cancels for the subscriber", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const { subscriptionId, subscription } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 1_000_000n,
    });
    const id = BigInt(subscriptionId);
    await devnet.advanceTime(10 * DAY);

    const paused = await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: id,
      action: "pause",
    });
    expect(paused.subscription.status).toBe("Paused");
    // The time left is reported, but the period itself does not move.
    expect(paused.subscription).toMatchObject({
      periodStart: subscription.periodStart,
      currentPeriodEnd: subscription.currentPeriodEnd,
    });
    const remaining = paused.subscription.pausedRemaining;
    expect(remaining).toBeGreaterThan(19 * DAY);
    expect(remaining).toBeLessThanOrEqual(20 * DAY);
    expect(paused.subscription.nextChargeAt).toBeNull();

    // Pausing twice is refused by the contract's rules, with a code and no gas spent.
    const again = await refusal(
      changeSubscriptionThroughFacilitator(client, subscriber, { subscriptionId: id, action: "pause" }),
    );
    expect(again.code).toBe("InvalidRequest");
    expect(again.details).toMatchObject({ reason: "invalid_status", status: "Paused" });

    await devnet.advanceTime(5 * DAY);
    const before = await balanceOf(subscriber.address);
    const resumed = await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: id,
      action: "resume",
    });
    // Resumed before the period's end: the same period goes on, the 5 paused days are not given back
    // (a relayed pause/resume cycle cannot stretch a paid period), and nothing is charged.
    expect(resumed.subscription).toMatchObject({
      status: "Active",
      periodStart: subscription.periodStart,
      currentPeriodEnd: subscription.currentPeriodEnd,
      pausedRemaining: 0,
    });
    expect(resumed.subscription.currentPeriodEnd - resumed.subscription.chainTime).toBeLessThan(remaining);
    expect(await balanceOf(subscriber.address)).toBe(before);

    const capped = await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: id,
      action: "overage",
      maxOverage: 5_000_000n,
    });
    expect(capped.subscription.maxOverage).toBe("5000000");

    const cancelled = await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: id,
      action: "cancel",
    });
    expect(cancelled.subscription.status).toBe("Cancelled");

    // The cancel answered once its log was indexed; the feed serves it once no older transaction is
    // still running, so wait for it rather than assume it is there already.
    const log = await subscriptionEvents(
      `provider=${provider.address}&limit=1000`,
      subscriptionId,
      "subscription.cancelled",
    );
    expect(log.map((e) => e.type)).toEqual([
      "subscription.created",
      "subscription.paused",
      "subscription.resumed",
      "subscription.cancelled",
    ]);
    expect(log.find((e) => e.type === "subscription.resumed")?.data).toMatchObject({
      periodEnd: subscription.currentPeriodEnd,
      charged: false,
    });
    expect(subscription.createdAt).toBeGreaterThan(0);
  });

  it("relays the spend limit the subscriber signed at subscribe and raises it with a signed SetSpendLimit; a limit signed by another key is refused", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const limit = PRICE + 1_000_000n;
    const result = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 2_000_000n,
      spendLimit: limit,
    });
    expect(result.subscription).toMatchObject({ spendLimit: limit.toString(), spent: PRICE.toString() });
    const id = BigInt(result.subscriptionId);
    const stranger = privateKeyToAccount(generatePrivateKey());
    const forged = await refusal(
      changeSubscriptionThroughFacilitator(client, stranger, {
        subscriptionId: id,
        action: "limit",
        spendLimit: 10n ** 18n,
      }),
    );
    expect(forged.code).toBe("InvalidSignature");
    const raised = await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: id,
      action: "limit",
      spendLimit: 2n * limit,
    });
    expect(raised.subscription).toMatchObject({
      spendLimit: (2n * limit).toString(),
      spent: PRICE.toString(),
    });
    // Without one, the intent signs none (2^256 - 1).
    const plain = await subscribeThroughFacilitator(client, await subscriberWith(20_000_000n), {
      planId,
      maxOverage: 0n,
    });
    expect(plain.subscription.spendLimit).toBe((2n ** 256n - 1n).toString());
  });

  it("refuses an action signed by someone other than the subscriber", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
    });
    const stranger = privateKeyToAccount(generatePrivateKey());
    const error = await refusal(
      changeSubscriptionThroughFacilitator(client, stranger, {
        subscriptionId: BigInt(subscriptionId),
        action: "cancel",
      }),
    );
    expect(error.code).toBe("InvalidSignature");
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");
  });

  it("limits how many relayed calls one subscriber may have the facilitator pay for", async () => {
    const subscriber = await subscriberWith(20_000_000n);
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
    });
    // A service allowing one relay per hour: the subscribe above was it.
    const strict = createSubscriptionService(tf.facilitator.context, {
      indexer: undefined,
      maxRelaysPerHour: 1,
    });
    const info = await getSubscriberInfo(client, subscriber.address);
    const request = await signSubscriptionActionRequest(subscriber, {
      chainId: devnet.chain.id,
      manager: devnet.contracts.subscriptionManager,
      action: "pause",
      subscriptionId: BigInt(subscriptionId),
      nonce: BigInt(info.intentNonce),
      deadline: BigInt(info.chainTime + 600),
    });
    const error = await refusal(strict.act(BigInt(subscriptionId), "pause", request));
    expect(error.code).toBe("RateLimited");
    expect(error.retryAfter).toBeGreaterThan(0);
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");
  });

  it("answers 404 for an unknown subscription and 400 for a malformed id or action", async () => {
    expect((await refusal(getSubscriptionInfo(client, 123456n))).code).toBe("NotFound");
    expect((await fetch(`${tf.url}/subscriptions/abc`)).status).toBe(400);
    const response = await fetch(`${tf.url}/subscriptions/1/explode`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(response.status).toBe(400);
  });
});

describe("renewal keeper", () => {
  it("collects due renewals once chain time passes the period end, moving the price exactly once", async () => {
    const subscriber = await subscriberWith(30_000_000n);
    const { subscriptionId, subscription } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
    });
    const before = {
      subscriber: await balanceOf(subscriber.address),
      provider: await balanceOf(provider.address),
    };
    const k = keeper();
    const early = await k.runOnce();
    expect(early.attempted).not.toContain(subscriptionId);

    await devnet.advanceTime(INTERVAL + 60);
    await k.runOnce();
    await k.runOnce();
    expect(await balanceOf(subscriber.address)).toBe(before.subscriber - PRICE);
    expect(await balanceOf(provider.address)).toBeGreaterThanOrEqual(before.provider + PRICE);

    const after = await getSubscriptionInfo(client, subscriptionId);
    expect(after.status).toBe("Active");
    expect(after.periodStart).toBe(subscription.currentPeriodEnd);
    const renewed = await subscriptionEvents(
      "types=subscription.renewed",
      subscriptionId,
      "subscription.renewed",
    );
    expect(renewed).toHaveLength(1);
    expect(renewed[0]?.data).toMatchObject({ provider: provider.address, amount: PRICE.toString() });
  });

  it("marks a subscriber without funds PastDue with subscription.renewal_failed, and does not retry at once", async () => {
    const subscriber = await subscriberWith(PRICE);
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
      approval: PRICE * 5n,
    });
    expect(await balanceOf(subscriber.address)).toBe(0n);
    await devnet.advanceTime(INTERVAL + 60);
    const k = keeper();
    await k.runOnce();
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("PastDue");
    const failed = await subscriptionEvents(
      "types=subscription.renewal_failed",
      subscriptionId,
      "subscription.renewal_failed",
    );
    expect(failed).toHaveLength(1);
    expect(failed[0]?.data).toMatchObject({ status: "PastDue", provider: provider.address });

    const second = await k.runOnce();
    expect(second.attempted).not.toContain(subscriptionId);

    // Funds arrive; a day of chain time later the keeper tries again and the subscription recovers.
    const funder = devnet.accounts[3]!;
    const hash = await transferToken(devnet.walletClient(funder), {
      token: devnet.contracts.usd,
      to: subscriber.address,
      amount: PRICE,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    await devnet.advanceTime(DAY + 1);
    await k.runOnce();
    const recovered = await getSubscriptionInfo(client, subscriptionId);
    expect(recovered.status).toBe("Active");
    expect(await balanceOf(subscriber.address)).toBe(0n);
  });
});

describe("indexer", () => {
  it("continues from its cursor after a restart without repeating events", async () => {
    const ctx = tf.facilitator.context;
    const first = createSubscriptionIndexer(ctx);
    await first.syncOnce();
    const before = await storedEventCount();
    const restarted = createSubscriptionIndexer(ctx);
    const result = await restarted.syncOnce();
    expect(result.logs).toBe(0);
    expect(await storedEventCount()).toBe(before);
    expect(await settledFeed()).toHaveLength(before);
  });

  it("applies nothing when the same logs are read again, and a snapshot start agrees with the replay", {
    timeout: 90_000,
  }, async () => {
    const ctx = tf.facilitator.context;
    const subscriber = await subscriberWith(20_000_000n);
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
    });
    await changeSubscriptionThroughFacilitator(client, subscriber, {
      subscriptionId: BigInt(subscriptionId),
      action: "pause",
    });
    const indexer = createSubscriptionIndexer(ctx, { chunkSize: 7 });
    await indexer.syncOnce();
    const before = await storedEventCount();
    // Rewind the shared cursor to the start: this indexer and the facilitator's own background one both
    // read every log again, concurrently, and neither may apply or emit anything twice.
    await tf.store.query("UPDATE chain_cursors SET block_number = -1");
    const again = await indexer.syncOnce();
    expect(again.fromBlock).toBe(0n);
    expect(again.logs).toBe(0);
    expect(await storedEventCount()).toBe(before);
    expect(await settledFeed()).toHaveLength(before);

    const replayed = await tf.store.query("SELECT * FROM subscriptions ORDER BY subscription_id");
    const snapshotStore = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const fresh = createSubscriptionIndexer({ ...ctx, store: snapshotStore }, { start: "snapshot" });
      await fresh.syncOnce();
      const snapshot = await snapshotStore.query("SELECT * FROM subscriptions ORDER BY subscription_id");
      // Why a past renewal failed is history too: the chain keeps no reason, only RenewalFailed's log.
      const strip = (rows: Record<string, unknown>[]) =>
        rows.map(
          ({ updated_at, last_block, created_tx, renewal_failure_code, renewal_failure_message, ...rest }) =>
            rest,
        );
      expect(snapshot.length).toBeGreaterThan(5);
      expect(strip(snapshot)).toEqual(strip(replayed));
      // A snapshot records state, not history: no events for what happened before it.
      expect(await snapshotStore.query("SELECT id FROM events")).toEqual([]);
    } finally {
      await snapshotStore.close();
    }
  });

  it("serves the event log filtered by type and provider, page by page from its cursor", async () => {
    const all = await settledFeed();
    const ids = all.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    const page = async (query: string) =>
      EventFeedResponseSchema.parse(
        await (await fetch(`${tf.url}/events?${query}`, { headers: providerAuth })).json(),
      );
    const first = await page("limit=3");
    expect(first.events.map((e) => e.id)).toEqual(ids.slice(0, 3));
    const second = await page(`after=${first.next}&limit=2`);
    expect(second.events.map((e) => e.id)).toEqual(ids.slice(3, 5));
    expect(second.next).not.toBe(first.next);
    expect(await events(`provider=${provider.address}`)).toEqual(all);
    // The feed is the key's provider's: naming another one, or sending no key, is refused.
    const stranger = privateKeyToAccount(generatePrivateKey()).address;
    const feed = (query: string, headers = providerAuth) => fetch(`${tf.url}/events?${query}`, { headers });
    expect((await feed(`provider=${stranger}`)).status).toBe(401);
    expect((await feed("limit=10", {})).status).toBe(401);
    expect((await feed("after=-1")).status).toBe(400);
    expect((await feed(`after=${ids[2]}`)).status).toBe(400);
    expect((await feed("provider=0x12")).status).toBe(400);
  });

  // Last: it rewinds the devnet.
  it("rebuilds the index when the chain no longer has the indexed blocks (a devnet restarted under the same store)", async () => {
    const ctx = tf.facilitator.context;
    const rewindTo = await devnet.snapshot();
    const doomed = await newPlan(1_111_111n);
    const indexer = createSubscriptionIndexer(ctx);
    await indexer.syncOnce();
    const amountOf = async (id: bigint) =>
      (await tf.store.query<{ amount: string }>("SELECT amount FROM plans WHERE plan_id = $1", [id]))[0]
        ?.amount;
    expect(await amountOf(doomed)).toBe("1111111");

    await devnet.revert(rewindTo);
    const replacement = await newPlan(2_222_222n);
    expect(replacement).toBe(doomed);
    await indexer.syncOnce();
    expect(await amountOf(replacement)).toBe("2222222");
    const [{ n }] = (await tf.store.query<{ n: string }>("SELECT count(*) AS n FROM subscriptions")) as [
      { n: string },
    ];
    const onChain = await devnet.publicClient.readContract({
      address: devnet.contracts.subscriptionManager,
      abi: subscriptionManagerAbi,
      functionName: "subscriptionCount",
    });
    expect(BigInt(n)).toBe(onChain);
  });
});
