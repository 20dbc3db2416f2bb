/**
 * Stalled renewals, the gate's side: when renewals stall, the stalled subscriptions stayed Active
 * and were served free. The SubscriptionManager keeps a subscription `Active` past the end of its paid
 * period until someone calls `collect`; with the keeper down (or stuck on a poisoned batch) nobody
 * does, and a gate that looked at the status alone served every later request of that period for
 * nothing. The gate now refuses a subscription whose paid period ended more than its grace period
 * (default 300 s of chain time) ago, until a collect starts the next period; a renewal the keeper
 * collects in time is never refused.
 *
 * Real devnet, real facilitator over HTTP with no keeper running (the test collects when it wants),
 * a gate on a real socket re-reading the subscription on every request, and a payer subscribed
 * through the facilitator.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../../src/client/createPayer.ts";
import {
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { createSubscriptionsModule } from "../../src/facilitator/subscriptionsModule.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../../src/http/facilitatorClient.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { getSubscriptionInfo } from "../../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n;

let devnet: Devnet;
let store: Store;
let facilitator: Facilitator;
let facilitatorServer: RunningServer;
let provider: DevnetAccount;
let planId: bigint;
let api: RunningServer;
let gate: PaymentGate & PaymentGateControls;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  // The subscriptions module without its keeper: renewals stall until the test collects them.
  facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[5]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    builtinModules: false,
    modules: [createSubscriptionsModule({ keeper: false })],
  });
  await facilitator.start();
  facilitatorServer = await serveApp(facilitator.app);

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

  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/report", (c) => c.json({ report: "quarterly" }));
  api = await serveApp(app);
  gate = paymentGate({
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: facilitatorServer.url,
    fetch,
    memoSecret: randomBytes(32),
    publicOrigin: api.url,
    // Every request reads the subscription afresh: what is tested is the verdict, not a cache.
    subscriptionStatusTtlMs: 0,
    subscriptionEventPollMs: 0,
    routes: {
      "GET /api/report": {
        pricing: [
          { type: "one-time", amount: 500_000n },
          { type: "subscription", plan: planId },
        ],
      },
    },
  });
  await gate.ready();
}, 60_000);

afterAll(async () => {
  await gate?.close();
  await api?.close();
  await facilitatorServer?.close();
  await facilitator?.stop();
  await store?.close();
  await devnet?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

/** A fresh subscriber (no ETH) subscribed through the facilitator, and its request headers. */
async function subscriber(): Promise<{ payer: Payer; subscriptionId: bigint; headers: Headers }> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 50_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorServer.url, fetch });
  const subscriptionId = await payer.subscribe({ planId });
  const headers = new Headers(await payer.subscriptionHeaders(subscriptionId, api.url));
  return { payer, subscriptionId, headers };
}

const report = (headers: Headers) => fetch(`${api.url}/api/report`, { headers });

async function refusal(response: Response): Promise<PaymentRequired> {
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

function collectRenewals() {
  const ctx = facilitator.context;
  return createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) }).runOnce();
}

describe("a subscription whose renewal is not collected", () => {
  it("is still served while its renewal is due by less than the grace period, so a keeper on time is never refused", async () => {
    const { subscriptionId, headers } = await subscriber();
    expect((await report(headers)).status).toBe(200);

    await devnet.advanceTime(INTERVAL + 60);
    expect((await report(headers)).status).toBe(200);

    const run = await collectRenewals();
    expect(run.renewed).toContain(subscriptionId.toString());
    expect((await report(headers)).status).toBe(200);
  });

  it("is refused with SubscriptionNotActive once the paid period ended more than the grace period ago, and served again when the renewal is collected", async () => {
    const { payer, subscriptionId, headers } = await subscriber();
    expect((await report(headers)).status).toBe(200);

    // The keeper is down: a month and an hour pass and nobody collects.
    await devnet.advanceTime(INTERVAL + 3_600);
    const client = createFacilitatorClient({ url: facilitatorServer.url, fetch });
    const stalled = await getSubscriptionInfo(client, subscriptionId);
    expect(stalled.status).toBe("Active");
    expect(stalled.chainTime).toBeGreaterThan(stalled.currentPeriodEnd + 300);

    const body = await refusal(await report(headers));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(/renewal is overdue/);
    // The refusal still offers both ways to pay.
    expect(body.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);

    const before = await balanceOf(payer.address);
    const run = await collectRenewals();
    expect(run.renewed).toContain(subscriptionId.toString());
    expect(await balanceOf(payer.address)).toBe(before - PRICE);
    expect((await report(headers)).status).toBe(200);
  });
});
