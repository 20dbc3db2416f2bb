/**
 * Subscriptions end to end (docs/protocol.md; docs/contracts.md; docs/gate.md; docs/client.md): a real anvil devnet with Tollgate's
 * contracts, a real facilitator over HTTP (relayed subscribe and lifecycle, indexer, event feed,
 * renewal keeper), a gate on a real socket selling a plan beside a one-time price, and payers using
 * `fetchWithPayment`, `payer.subscribe` and sub-auth tokens with the global `fetch`.
 *
 * The gate polls the facilitator's event feed only when told (`syncEvents`), so each step below shows
 * the invalidation at work rather than waiting for a timer or a TTL.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import type { SubscriptionUse } from "../src/client/fetchOptions.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import {
  type GateResult,
  type PaymentGate,
  type PaymentGateControls,
  paymentGate,
} from "../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import { isTollgateError, type TollgateError } from "../src/protocol/errors.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n; // 9 USDC per 30 days
const ONE_TIME = 500_000n; // 0.50 USDC per request

let devnet: Devnet;
let tf: TestFacilitator;
let client: FacilitatorClient;
let provider: DevnetAccount;
let planId: bigint;
let api: RunningServer;
let gate: PaymentGate & PaymentGateControls;
const results: GateResult[] = [];

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

function keeper() {
  const ctx = tf.facilitator.context;
  return createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) });
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  client = createFacilitatorClient({ url: tf.url, fetch });
  provider = devnet.accounts[1]!;
  const hash = await createPlan(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: PRICE,
    interval: BigInt(INTERVAL),
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));

  // The API: a report sold per request or under the plan. The gate needs its public origin, known
  // once the socket listens.
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    results.push(result);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/report", (c) => c.json({ report: "quarterly" }));
  api = await serveApp(app);
  gate = paymentGate({
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch,
    memoSecret: randomBytes(32),
    publicOrigin: api.url,
    // The facilitator's event feed is per provider and needs the provider's key.
    providerApiKey: (await registerProvider(client, provider.account)).apiKey,
    subscriptionEventPollMs: 0,
    routes: {
      "GET /api/report": {
        pricing: [
          { type: "one-time", amount: ONE_TIME },
          { type: "subscription", plan: planId },
        ],
      },
    },
  });
  await gate.ready();
});

afterAll(async () => {
  await gate?.close();
  await api?.close();
  await tf?.stop();
  await devnet?.stop();
});

/** A payer with test USD and no ETH (subscribing is gasless). */
async function newPayer(
  usd: bigint,
  options: { eth?: bigint } = {},
): Promise<{ payer: Payer; address: Address }> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd, ...(options.eth === undefined ? {} : { eth: options.eth }) });
  const payer = createPayer({
    account,
    network: devnet.network,
    facilitator: tf.url,
    fetch,
    ...(options.eth === undefined ? {} : { walletClient: devnet.walletClient(account) }),
  });
  return { payer, address: account.address };
}

const report = () => `${api.url}/api/report`;

async function refusal(response: Response): Promise<PaymentRequired> {
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

/**
 * Syncs the gate with the facilitator's event feed until a request carrying `headers` is answered
 * `status`. The feed serves an event only once every older transaction of the database has finished
 * (docs/subscriptions.md); on a PostgreSQL server shared with other suites that can be a moment after
 * the change committed, so one sync may not see it yet. The probe pays nothing.
 */
async function syncUntil(
  payer: Payer,
  subscriptionId: Parameters<Payer["subscriptionHeaders"]>[0],
  status: 200 | 402,
): Promise<void> {
  const headers = await payer.subscriptionHeaders(subscriptionId, api.url);
  const deadline = Date.now() + 15_000;
  for (;;) {
    await gate.syncEvents();
    const response = await fetch(report(), { headers });
    await response.body?.cancel();
    if (response.status === status) return;
    if (Date.now() > deadline) throw new Error(`the gate still answers ${response.status}, not ${status}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A `fetch` that counts the 402s it sees: a subscribed call that sends its headers up front sees none. */
function counting() {
  const statuses: number[] = [];
  const wrapped = async (input: Request | string | URL, init?: RequestInit) => {
    const response = await fetch(input, init);
    statuses.push(response.status);
    return response;
  };
  return { fetch: wrapped, statuses };
}

describe("a subscription through its life", () => {
  // One-time payments are signed against the wall clock: this runs before chain time is moved.
  it("pays once instead when the subscription is refused and choose says so", async () => {
    const { payer, address } = await newPayer(30_000_000n);
    const subscriptionId = await payer.subscribe({ planId });
    payer.subscriptions.remember({ planId, subscriptionId, origin: api.url });
    await payer.pause(subscriptionId);
    await syncUntil(payer, subscriptionId, 402);
    const before = await balanceOf(address);
    const refusals: string[] = [];
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: "1",
      choose: (_options, context) => {
        if (context.refusal !== undefined) refusals.push(context.refusal.error);
        return context.affordable[0];
      },
    });
    const response = await paidFetch(report());
    expect(response.status).toBe(200);
    expect(refusals).toEqual(["SubscriptionNotActive"]);
    expect(results.at(-1)).toMatchObject({ kind: "pass", paid: { amount: ONE_TIME, payer: address } });
    expect(await balanceOf(address)).toBe(before - ONE_TIME);
  });

  it("subscribes when chosen, is served without paying, renews once, and is refused while paused or cancelled", async () => {
    const { payer, address } = await newPayer(30_000_000n);
    const uses: SubscriptionUse[] = [];
    const wire = counting();
    const paidFetch = fetchWithPayment(wire.fetch, payer, {
      maxPrice: "1",
      // The agent's policy would decide; this one always subscribes.
      choose: (options, context) =>
        context.refusal === undefined ? options.find((o) => o.scheme === "subscription") : undefined,
      onSubscribe: (use) => uses.push(use),
      onPayment: () => {
        throw new Error("nothing is paid once in this flow");
      },
    });
    const before = { payer: await balanceOf(address), provider: await balanceOf(provider.address) };

    // 402 → subscribe (gasless: permit + subscribeFor relayed) → retry with the subscription → 200.
    const first = await paidFetch(report());
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ report: "quarterly" });
    expect(uses).toHaveLength(1);
    expect(uses[0]).toMatchObject({ planId: planId.toString(), created: true });
    const subscriptionId = uses[0]!.subscriptionId;
    expect(results.at(-1)).toMatchObject({
      kind: "pass",
      subscription: { subscriptionId, subscriber: address },
    });
    expect(await balanceOf(address)).toBe(before.payer - PRICE);
    expect(await balanceOf(provider.address)).toBe(before.provider + PRICE);

    // Later calls send the headers up front: no 402, no new payment, no new subscription.
    wire.statuses.length = 0;
    for (let i = 0; i < 3; i++) expect((await paidFetch(report())).status).toBe(200);
    expect(wire.statuses).toEqual([200, 200, 200]);
    expect(uses).toHaveLength(1);
    expect(await balanceOf(address)).toBe(before.payer - PRICE);

    // 30 days on, the keeper collects the renewal: the price moves exactly once.
    await devnet.advanceTime(INTERVAL + 60);
    await keeper().runOnce();
    await keeper().runOnce();
    expect(await balanceOf(address)).toBe(before.payer - 2n * PRICE);
    expect(await balanceOf(provider.address)).toBe(before.provider + 2n * PRICE);
    await gate.syncEvents();
    expect((await paidFetch(report())).status).toBe(200);

    // Paused: refused with SubscriptionNotActive, surfaced as a typed error naming its state (choose
    // declines to pay once).
    await payer.pause(subscriptionId);
    await syncUntil(payer, subscriptionId, 402);
    const paused = await paidFetch(report()).catch((error: unknown) => error);
    expect(isTollgateError(paused, "SubscriptionNotActive")).toBe(true);
    expect((paused as TollgateError).message).toMatch(/paused/);
    expect((paused as TollgateError).details).toMatchObject({ state: "Paused" });

    // Resumed: served again, under the same subscription, which stayed bound to the origin while
    // paused (so no new subscription and nothing paid once in between).
    await payer.resume(subscriptionId);
    await syncUntil(payer, subscriptionId, 200);
    wire.statuses.length = 0;
    expect((await paidFetch(report())).status).toBe(200);
    expect(wire.statuses).toEqual([200]);
    expect(results.at(-1)).toMatchObject({ kind: "pass", subscription: { subscriptionId } });
    expect(uses).toHaveLength(1);

    // Cancelled: the same headers are refused.
    const headers = await payer.subscriptionHeaders(subscriptionId, api.url);
    await payer.cancel(subscriptionId);
    await syncUntil(payer, subscriptionId, 402);
    const cancelled = await refusal(await fetch(report(), { headers }));
    expect(cancelled.error).toBe("SubscriptionNotActive");
    expect(cancelled.message).toMatch(/cancelled/);
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Cancelled");
    expect(await balanceOf(address)).toBe(before.payer - 2n * PRICE);
  });

  it("leaves a subscriber who cannot pay the renewal PastDue, and refuses it", async () => {
    const { payer, address } = await newPayer(PRICE);
    const subscriptionId = await payer.subscribe({ planId, approval: 5n * PRICE });
    expect(await balanceOf(address)).toBe(0n);
    const headers = await payer.subscriptionHeaders(subscriptionId, api.url);
    expect((await fetch(report(), { headers })).status).toBe(200);

    await devnet.advanceTime(INTERVAL + 60);
    await keeper().runOnce();
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("PastDue");
    await syncUntil(payer, subscriptionId, 402);
    const body = await refusal(await fetch(report(), { headers }));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(/past due/);
    // The refusal still offers both ways to pay.
    expect(body.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);
  });

  it("refuses someone else's subscription id carried with a token the caller signed itself", async () => {
    const owner = await newPayer(20_000_000n);
    const subscriptionId = await owner.payer.subscribe({ planId });
    const thief = await newPayer(0n);
    const headers = await thief.payer.subscriptionHeaders(subscriptionId, api.url);
    const body = await refusal(await fetch(report(), { headers }));
    expect(body.error).toBe("SubscriptionAuthInvalid");
    // The owner's own token works.
    expect(
      (await fetch(report(), { headers: await owner.payer.subscriptionHeaders(subscriptionId, api.url) }))
        .status,
    ).toBe(200);
  });

  it("refuses a token minted for another gate's origin", async () => {
    const { payer } = await newPayer(20_000_000n);
    const subscriptionId = await payer.subscribe({ planId });
    const headers = await payer.subscriptionHeaders(subscriptionId, "https://another-gate.example.com");
    const body = await refusal(await fetch(report(), { headers }));
    expect(body.error).toBe("SubscriptionAuthInvalid");
    expect(body.message).toMatch(/another-gate\.example\.com/);
  });

  it("subscribes directly on chain from a wallet client (approve + subscribe) and is served", async () => {
    const { payer, address } = await newPayer(20_000_000n, { eth: 10n ** 18n });
    const before = await balanceOf(address);
    const subscriptionId = await payer.subscribe({ planId, maxOverage: "0", direct: true });
    expect(await balanceOf(address)).toBe(before - PRICE);
    expect((await getSubscriptionInfo(client, subscriptionId)).subscriber).toBe(address);
    const headers = await payer.subscriptionHeaders(subscriptionId, api.url);
    expect((await fetch(report(), { headers })).status).toBe(200);
  });
});
