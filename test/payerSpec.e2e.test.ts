/**
 * The specification's payer operations, called exactly as it writes them, end to end: a
 * real anvil devnet with Tollgate's contracts, a real facilitator over HTTP, and a gate on a real
 * socket selling a report per request or under a plan flagged `subscriptionScheme: true`.
 *
 * - `agent.pay(terms)`: `agent` is the payer `createPayer` returns, `terms` one `accepts` entry of
 *   a 402 (or the body, the Response, or a URL with `maxAmount` for the whole flow).
 * - `agent.subscribe({ planId, maxOverage })` with `maxOverage` a number in USDC.
 * - the default chooser prefers the flagged plan when the caller allows subscribing, and a paused
 *   subscription is a typed error, not a silent one-time payment, unless the caller allows it.
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
import { isTollgateError } from "../src/protocol/errors.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { SubscriptionNotActiveError } from "../src/schemes/subscription/client/subscriptionNotActiveError.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const INTERVAL = 30 * 86_400;
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
const report = () => `${api.url}/api/report`;

/**
 * Syncs the gate with the facilitator's event feed until a request carrying the subscription is
 * answered `status`: the feed serves an event only once older transactions of the database finished,
 * so on a PostgreSQL server shared with other suites one sync may come a moment early. Pays nothing.
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

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
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

/** The specification's `agent`: a payer with test USD and no ETH. */
async function newAgent(usd: bigint): Promise<{ agent: Payer; address: Address }> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd });
  return {
    agent: createPayer({ account, network: devnet.network, facilitator: tf.url, fetch }),
    address: account.address,
  };
}

async function unpaid(): Promise<{ response: Response; body: PaymentRequired }> {
  const response = await fetch(report());
  expect(response.status).toBe(402);
  return { response, body: PaymentRequiredSchema.parse(await response.clone().json()) };
}

describe("agent.pay(terms)", () => {
  it("pays one accepts entry of the 402 exactly so, and the gate serves the proof", async () => {
    const { agent, address } = await newAgent(5_000_000n);
    const { body } = await unpaid();
    const terms = body.accepts.find((o) => o.scheme === "exact")!;
    const receipt = await agent.pay(terms);
    expect(receipt.proof).toMatchObject({
      amount: ONE_TIME.toString(),
      payer: address,
      payTo: provider.address,
    });
    const served = await fetch(report(), { headers: { "X-PAYMENT": receipt.header } });
    expect(served.status).toBe(200);
    expect(await served.json()).toEqual({ report: "quarterly" });
    expect(await balanceOf(address)).toBe(5_000_000n - ONE_TIME);
  });

  it("pays the whole 402 (body or Response) by its one-time option, never by subscribing", async () => {
    const { agent, address } = await newAgent(5_000_000n);
    const fromBody = await agent.pay((await unpaid()).body);
    expect(fromBody.option.scheme).toBe("exact");
    const fromResponse = await agent.pay((await unpaid()).response);
    expect(fromResponse.option.scheme).toBe("exact");
    expect(await balanceOf(address)).toBe(5_000_000n - 2n * ONE_TIME);
  });

  it("given the URL, performs the whole flow: request, pay, retry with the proof", async () => {
    const { agent, address } = await newAgent(5_000_000n);
    const { response, receipt } = await agent.pay(report(), { maxAmount: "0.50" });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ report: "quarterly" });
    expect(receipt?.proof.payer).toBe(address);
    expect(results.at(-1)).toMatchObject({ kind: "pass", paid: { amount: ONE_TIME, payer: address } });
    expect(await balanceOf(address)).toBe(5_000_000n - ONE_TIME);

    const dear = await agent.pay(report(), { maxAmount: "0.49" }).catch((e: unknown) => e);
    expect(isTollgateError(dear, "PriceCeilingExceeded")).toBe(true);
    expect(await balanceOf(address)).toBe(5_000_000n - ONE_TIME);
  });

  it("refuses what is not terms with a typed error, paying nothing", async () => {
    const { agent, address } = await newAgent(1_000_000n);
    for (const wrong of [undefined, { price: "0.50" }, new Response("ok")]) {
      const error = await agent.pay(wrong as never).catch((e: unknown) => e);
      expect(isTollgateError(error, "InvalidRequest")).toBe(true);
    }
    expect(await balanceOf(address)).toBe(1_000_000n);
  });
});

describe("agent.subscribe({ planId, maxOverage })", () => {
  it("takes maxOverage as a number of USDC, converted exactly", async () => {
    const { agent, address } = await newAgent(20_000_000n);
    const subscriptionId = await agent.subscribe({ planId, maxOverage: 2 });
    const info = await getSubscriptionInfo(client, subscriptionId);
    expect(info).toMatchObject({ subscriber: address, maxOverage: "2000000", status: "Active" });
    expect(await balanceOf(address)).toBe(20_000_000n - PRICE);

    const text = await agent.setMaxOverage(subscriptionId, "2.50");
    expect(text.maxOverage).toBe("2500000");
    const inexact = await agent.subscribe({ planId, maxOverage: 0.1 + 0.2 }).catch((e: unknown) => e);
    expect(isTollgateError(inexact, "InvalidAmount")).toBe(true);
    expect(await balanceOf(address)).toBe(20_000_000n - PRICE);
  });
});

describe("fetchWithPayment and subscriptions", () => {
  it("subscribes to the plan the 402 flags with subscriptionScheme when the caller allows it", async () => {
    const { agent, address } = await newAgent(30_000_000n);
    const paidFetch = fetchWithPayment(fetch, agent, {
      maxPrice: "1",
      subscription: { maxPrice: "9", maxOverage: 1 },
      onPayment: () => {
        throw new Error("the flagged plan is preferred to paying once");
      },
    });
    expect((await paidFetch(report())).status).toBe(200);
    expect((await paidFetch(report())).status).toBe(200);
    const subscriptionId = agent.subscriptions.forPlan(planId)!;
    expect(await getSubscriptionInfo(client, subscriptionId)).toMatchObject({
      subscriber: address,
      maxOverage: "1000000",
    });
    expect(results.at(-1)).toMatchObject({ kind: "pass", subscription: { subscriptionId } });
    expect(await balanceOf(address)).toBe(30_000_000n - PRICE);

    // Without leave to subscribe, the same default chooser pays once.
    const { agent: other, address: otherAddress } = await newAgent(1_000_000n);
    expect((await fetchWithPayment(fetch, other, { maxPrice: "1" })(report())).status).toBe(200);
    expect(await balanceOf(otherAddress)).toBe(1_000_000n - ONE_TIME);
  });

  it("surfaces a paused subscription as SubscriptionNotActive, and pays once only when allowed", async () => {
    const { agent, address } = await newAgent(30_000_000n);
    const paidFetch = fetchWithPayment(fetch, agent, { maxPrice: "1", subscription: { maxPrice: "9" } });
    expect((await paidFetch(report())).status).toBe(200);
    const subscriptionId = agent.subscriptions.forPlan(planId)!;
    await agent.pause(subscriptionId);
    await syncUntil(agent, subscriptionId, 402);
    const afterSubscribing = await balanceOf(address);

    for (let i = 0; i < 2; i++) {
      const error = await paidFetch(report()).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SubscriptionNotActiveError);
      expect(error).toMatchObject({ code: "SubscriptionNotActive", subscriptionId, state: "Paused" });
    }
    expect(await balanceOf(address)).toBe(afterSubscribing);

    const payOnce = fetchWithPayment(fetch, agent, { maxPrice: "1", onSubscriptionInactive: "pay-once" });
    expect((await payOnce(report())).status).toBe(200);
    expect(results.at(-1)).toMatchObject({ kind: "pass", paid: { amount: ONE_TIME, payer: address } });
    expect(await balanceOf(address)).toBe(afterSubscribing - ONE_TIME);

    // Resumed: the same subscription serves again, with nothing paid once.
    await agent.resume(subscriptionId);
    await syncUntil(agent, subscriptionId, 200);
    expect((await paidFetch(report())).status).toBe(200);
    expect(results.at(-1)).toMatchObject({ kind: "pass", subscription: { subscriptionId } });
    expect(await balanceOf(address)).toBe(afterSubscribing - ONE_TIME);
  });
});
