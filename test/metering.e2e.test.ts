/**
 * Metered subscriptions end to end (docs/contracts.md; docs/gate.md): a real devnet, a real facilitator (usage
 * recording and batched `deductAllowanceMany` settlement, indexer, keeper), and two gate instances of
 * one API on real sockets sharing a usage ledger in PGlite (PostgreSQL when DATABASE_URL is set).
 *
 * Included units are free; each use past them is charged the plan's unit price against the
 * subscriber's overage cap, reserved atomically across both instances; charges reach the chain in
 * batches, so far fewer transactions than requests, and exactly the recorded amounts move.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import {
  type GateResult,
  type PaymentGate,
  type PaymentGateControls,
  paymentGate,
} from "../src/gate/paymentGate.ts";
import type { Clock } from "../src/protocol/clock.ts";
import { isTollgateError } from "../src/protocol/errors.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import {
  type EventFeedResponse,
  EventFeedResponseSchema,
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
  UsageSummarySchema,
} from "../src/protocol/subscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { createPostgresUsageLedger } from "../src/schemes/subscription/gate/usage/createPostgresUsageLedger.ts";
import type { UsageLedger } from "../src/schemes/subscription/gate/usage/usageLedger.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 5_000_000n; // 5 USDC per 30 days
const INCLUDED = 3;
const UNIT = 10_000n; // 0.01 USDC per unit past the included ones
/** The API's public origin: both instances sit behind it, and tokens name it. */
const PUBLIC_ORIGIN = "https://search.api.test";

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let apiKey: string;
let planId: bigint;
let store: Store;
let ledger: UsageLedger;
/** The gates' clock: the wall clock, moved forward by the test where the cache must be stale. */
let skewMs = 0;
const gateClock: Clock = { now: () => Date.now() + skewMs };
const instances: {
  url: string;
  gate: PaymentGate & PaymentGateControls;
  results: GateResult[];
  server: RunningServer;
}[] = [];

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function post(path: string, body: unknown) {
  return fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** The provider proves its payout address and gets the API key its gates send usage with. */
async function registerProvider(account: DevnetAccount): Promise<string> {
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: account.address })).json(),
  );
  const signature = await account.account.signMessage({ message: challenge.challenge });
  const response = await post("/providers", {
    address: account.address,
    challenge: challenge.challenge,
    signature,
  });
  return ProviderRegisterResponseSchema.parse(await response.json()).apiKey;
}

/** What the gates log at warn or above: printed with a failed exposure check, so a failure explains itself. */
const gateWarnings: string[] = [];
const gateLogger = {
  debug: () => {},
  warn: (...args: unknown[]) => void gateWarnings.push(`warn ${JSON.stringify(args)}`),
  error: (...args: unknown[]) => void gateWarnings.push(`error ${JSON.stringify(args)}`),
};

async function startInstance() {
  const results: GateResult[] = [];
  const gate = paymentGate({
    logger: gateLogger,
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch,
    memoSecret: "one-secret-shared-by-every-instance-of-this-api",
    clock: gateClock,
    publicOrigin: PUBLIC_ORIGIN,
    providerApiKey: apiKey,
    usageLedger: ledger,
    subscriptionEventPollMs: 0,
    usageFlushIntervalMs: 0,
    routes: { "GET /api/search": { pricing: [{ type: "subscription", plan: planId }] } },
  });
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    results.push(result);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/search", (c) => c.json({ hits: [c.req.query("q") ?? ""] }));
  const server = await serveApp(app);
  const instance = { url: server.url, gate, results, server };
  instances.push(instance);
  return instance;
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[1]!;
  apiKey = await registerProvider(provider);
  const wallet = devnet.walletClient(provider);
  // The facilitator deducts on the provider's plans as its operator.
  await devnet.publicClient.waitForTransactionReceipt({
    hash: await setOperator(wallet, {
      manager: devnet.contracts.subscriptionManager,
      operator: tf.facilitator.context.gas.address,
      allowed: true,
    }),
  });
  const hash = await createPlan(wallet, {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: PRICE,
    interval: BigInt(INTERVAL),
    includedUnits: BigInt(INCLUDED),
    overageUnitPrice: UNIT,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
  ledger = await createPostgresUsageLedger(store, {
    name: `search-${randomBytes(4).toString("hex")}`,
    clock: gateClock,
  });
  await startInstance();
  await startInstance();
});

afterAll(async () => {
  for (const instance of instances) {
    await instance.gate.close();
    await instance.server.close();
  }
  await store?.close();
  await tf?.stop();
  await devnet?.stop();
});

async function subscriber(
  maxOverage: string,
): Promise<{ payer: Payer; address: Address; subscriptionId: bigint }> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 20_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
  const subscriptionId = await payer.subscribe({ planId, maxOverage });
  return { payer, address: account.address, subscriptionId };
}

type Outcome = bigint | string;

/** Sends `n` searches through the instances in turn; each outcome is the charge, or the 402 error. */
async function searches(
  payer: Payer,
  subscriptionId: bigint,
  n: number,
  options: { concurrent?: boolean } = {},
) {
  const headers = await payer.subscriptionHeaders(subscriptionId, PUBLIC_ORIGIN);
  const one = async (i: number): Promise<Outcome> => {
    const instance = instances[i % instances.length]!;
    const response = await fetch(`${instance.url}/api/search?q=${i}`, { headers });
    if (response.status === 200) {
      const pass = instance.results.find(
        (r) => r.kind === "pass" && r.subscription?.subscriptionId === subscriptionId && !seen.has(r),
      );
      if (pass?.kind !== "pass") throw new Error("no pass recorded");
      seen.add(pass);
      return pass.subscription!.charge;
    }
    return PaymentRequiredSchema.parse(await response.json()).error;
  };
  if (options.concurrent === true) return Promise.all(Array.from({ length: n }, (_, i) => one(i)));
  const outcomes: Outcome[] = [];
  for (let i = 0; i < n; i++) outcomes.push(await one(i));
  return outcomes;
}
const seen = new Set<GateResult>();

const charged = (outcomes: Outcome[]) =>
  outcomes.reduce<bigint>((sum, o) => (typeof o === "bigint" ? sum + o : sum), 0n);

/** Flushes both instances, then waits until the facilitator has settled (or failed) every record. */
async function settle(subscriptionId: bigint, expectedSettled: bigint) {
  for (const instance of instances) await instance.gate.flushUsage();
  for (let i = 0; i < 300; i++) {
    const response = await fetch(`${tf.url}/usage?subscriptionId=${subscriptionId}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    const summary = UsageSummarySchema.parse(await response.json());
    if (summary.unsettled.count === 0 && BigInt(summary.settled.amount) === expectedSettled) return summary;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("usage did not settle");
}

/**
 * The subscription's `allowance.deducted` events, once they add up to `expected`. The facilitator
 * marks a usage record settled from the receipt and writes the event when its indexer reads the same
 * log a moment later, so a settled summary does not mean the event is in the log yet.
 */
async function deductions(subscriptionId: bigint, expected: bigint) {
  let events: EventFeedResponse["events"] = [];
  for (let i = 0; i < 100; i++) {
    const response = await fetch(
      `${tf.url}/events?types=allowance.deducted&provider=${provider.address}&limit=1000`,
      { headers: { authorization: `Bearer ${apiKey}` } },
    );
    events = EventFeedResponseSchema.parse(await response.json()).events.filter(
      (e) => e.data.subscriptionId === subscriptionId.toString(),
    );
    if (events.reduce((sum, e) => sum + BigInt(String(e.data.amount)), 0n) >= expected) return events;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return events;
}

describe("metered subscriptions", () => {
  it("serves included units free, charges each use past them, refuses at the cap until it is raised, and settles exactly in few transactions", async () => {
    const { payer, address, subscriptionId } = await subscriber("0.05");
    const before = { payer: await balanceOf(address), provider: await balanceOf(provider.address) };

    const first = await searches(payer, subscriptionId, 9);
    expect(first).toEqual([0n, 0n, 0n, UNIT, UNIT, UNIT, UNIT, UNIT, "AllowanceExhausted"]);
    const refused = PaymentRequiredSchema.parse(
      await (
        await fetch(`${instances[0]!.url}/api/search`, {
          headers: await payer.subscriptionHeaders(subscriptionId, PUBLIC_ORIGIN),
        })
      ).json(),
    );
    expect(refused.message).toMatch(/raise the cap \(payer\.setMaxOverage\) or upgrade the plan/);

    // Through fetchWithPayment the refusal is a typed error (the policy declines to pay once).
    payer.subscriptions.remember({
      planId,
      subscriptionId,
      origin: instances[0]!.url,
      audience: PUBLIC_ORIGIN,
    });
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: "1",
      choose: (options, context) => (context.refusal === undefined ? options[0] : undefined),
    });
    const error = await paidFetch(`${instances[0]!.url}/api/search`).catch((e: unknown) => e);
    expect(isTollgateError(error, "AllowanceExhausted")).toBe(true);

    // The first charges go on chain while the subscriber raises its cap (relayed, gasless).
    await settle(subscriptionId, 5n * UNIT);
    await payer.setMaxOverage(subscriptionId, "0.08");
    skewMs += 1_500; // the gates re-read a subscription at its cap at most once a second
    const second = await searches(payer, subscriptionId, 4);
    expect(second).toEqual([UNIT, UNIT, UNIT, "AllowanceExhausted"]);
    const total = charged([...first, ...second]);
    expect(total).toBe(8n * UNIT);

    const summary = await settle(subscriptionId, total);
    expect(summary.failed.count).toBe(0);
    expect(await balanceOf(address)).toBe(before.payer - total);
    expect(await balanceOf(provider.address)).toBe(before.provider + total);
    const events = await deductions(subscriptionId, total);
    expect(events.reduce((sum, e) => sum + BigInt(String(e.data.amount)), 0n)).toBe(total);
    const transactions = new Set(events.map((e) => e.data.transaction));
    // 13 requests, 8 of them charged: two deductions, one per flush.
    expect(transactions.size).toBeLessThanOrEqual(2);

    // Settled charges leave the gates' exposure once the events are applied.
    for (const instance of instances) await instance.gate.syncEvents();
    expect(
      await ledger.unsettled(),
      `gate warnings: ${gateWarnings.join("; ") || "none"}; unresolved: ${JSON.stringify(
        await ledger.unresolved({ olderThanMs: 0, limit: 20 }),
        (_key, value) => (typeof value === "bigint" ? value.toString() : value),
      )}`,
    ).toBe(0n);
  });

  it("starts a new cycle at renewal: the included units are free again", async () => {
    const { payer, subscriptionId } = await subscriber("0.05");
    expect(await searches(payer, subscriptionId, 4)).toEqual([0n, 0n, 0n, UNIT]);
    await devnet.advanceTime(INTERVAL + 60);
    const ctx = tf.facilitator.context;
    await createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) }).runOnce();
    for (const instance of instances) await instance.gate.syncEvents();
    expect(await searches(payer, subscriptionId, 4)).toEqual([0n, 0n, 0n, UNIT]);
    await settle(subscriptionId, 2n * UNIT);
  });

  it("admits exactly what the cap allows among concurrent requests to two instances", async () => {
    const { payer, address, subscriptionId } = await subscriber("0.05");
    const before = await balanceOf(address);
    const outcomes = await searches(payer, subscriptionId, 20, { concurrent: true });
    expect(outcomes.filter((o) => o === 0n)).toHaveLength(INCLUDED);
    expect(outcomes.filter((o) => o === UNIT)).toHaveLength(5);
    expect(outcomes.filter((o) => o === "AllowanceExhausted")).toHaveLength(12);
    await settle(subscriptionId, 5n * UNIT);
    expect(await balanceOf(address)).toBe(before - 5n * UNIT);
  });
});
