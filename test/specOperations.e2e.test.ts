/**
 * The specification's provider-side operations, called exactly as it writes them, over a
 * real devnet and a real facilitator: `paymentGate({ pricing: [...] })` on a path prefix,
 * `parsePaymentProof(headerValue)`, `verifyPaymentProof(proof)`, `buildPaymentRequired({ plan })`,
 * `deductAllowance(amount)` from a handler (its charge read back from the chain once flushed), the
 * served subscription in the Hono, Express and `node:http` adapters, and `allowance.exhausted`
 * delivered to a real webhook receiver when the gate refuses a metered call at the cap.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { Hono } from "hono";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getSubscription } from "../src/chain/actions/subscriptions/getSubscription.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { CreateWebhookResponseSchema } from "../src/facilitator/webhooks/webhookApi.ts";
import {
  buildPaymentRequired,
  createProofVerifier,
  deductAllowance,
  expressPaymentGate,
  honoPaymentGate,
  nodePaymentGate,
  type PaymentGateEnv,
  parsePaymentProof,
  paymentGate,
  type ServedSubscription,
  verifyPaymentProof,
  verifyWebhook,
} from "../src/gate/index.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { isTollgateError, TollgateError } from "../src/protocol/errors.ts";
import { AuthorizeResponseSchema } from "../src/protocol/facilitator.ts";
import { encodeJsonHeader } from "../src/protocol/header.ts";
import type { PaymentProof } from "../src/protocol/paymentProof.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import {
  EventFeedResponseSchema,
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
  UsageExhaustedResponseSchema,
  type UsageSummary,
  UsageSummarySchema,
} from "../src/protocol/subscriptions.ts";
import type { WebhookEvent } from "../src/protocol/webhook.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const PRICE = 5_000_000n; // 5 USDC per 30 days
const INCLUDED = 2n;
const UNIT = 10_000n; // 0.01 USDC per unit past the included ones
const PUBLIC_ORIGIN = "https://api.spec.test";

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let buyer: DevnetAccount;
let apiKey: string;
let otherApiKey: string;
let planId: bigint;
let gate: ReturnType<typeof paymentGate>;
const servers: RunningServer[] = [];
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let webhookSecret: string;
const urls = { hono: "", express: "", node: "" };

async function post(path: string, body: unknown, key?: string) {
  return fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(key === undefined ? {} : { authorization: `Bearer ${key}` }),
    },
    body: JSON.stringify(body),
  });
}

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

/** A real webhook receiver on loopback (the test facilitator allows loopback targets). */
async function startReceiver() {
  const received: { headers: IncomingHttpHeaders; body: string }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(200, { "content-type": "text/plain" }).end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** What every adapter's handler answers: the subscription as the handler reads it. */
function describeSubscription(subscription: ServedSubscription | undefined) {
  if (subscription === undefined) return { subscription: null };
  return {
    subscription: {
      subscriptionId: subscription.subscriptionId.toString(),
      planId: subscription.planId,
      subscriber: subscription.subscriber,
      units: subscription.units,
      unitsUsed: subscription.unitsUsed?.toString() ?? null,
      charge: subscription.charge.toString(),
    },
  };
}

/** `deductAllowance(10_000)` as the specification writes it; a refusal becomes the gate's 402 code. */
async function render(): Promise<{ status: 200 | 402; body: unknown }> {
  try {
    const deducted = await deductAllowance(10_000);
    return { status: 200, body: { deducted: deducted.amount.toString() } };
  } catch (error) {
    if (isTollgateError(error, "AllowanceExhausted")) {
      return { status: 402, body: { error: error.code, message: error.message } };
    }
    throw error;
  }
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[1]!;
  buyer = devnet.accounts[2]!;
  apiKey = await registerProvider(provider);
  otherApiKey = await registerProvider(devnet.accounts[3]!);
  const wallet = devnet.walletClient(provider);
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
    interval: BigInt(30 * DAY),
    includedUnits: INCLUDED,
    overageUnitPrice: UNIT,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));

  receiver = await startReceiver();
  const created = await post("/webhooks", { url: receiver.url, events: ["allowance.exhausted"] }, apiKey);
  expect(created.status).toBe(201);
  webhookSecret = CreateWebhookResponseSchema.parse(await created.json()).secret;

  // The specification's gate, with the options a real deployment adds.
  gate = paymentGate({
    pricing: [
      { type: "subscription", plan: planId.toString() },
      { type: "one-time", amount: 500000 },
    ],
    routes: {
      // A route whose handler charges by itself: no metered units, only deductAllowance.
      "POST /api/render": { pricing: [{ type: "subscription", plan: planId.toString() }], units: 0 },
    },
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch,
    memoSecret: randomBytes(32),
    publicOrigin: PUBLIC_ORIGIN,
    providerApiKey: apiKey,
    subscriptionEventPollMs: 0,
    usageFlushIntervalMs: 0,
  });

  const hono = new Hono<PaymentGateEnv>();
  hono.use("/api/*", honoPaymentGate(gate));
  hono.get("/api/*", (c) =>
    c.json({ paidBy: c.get("payment")?.payer ?? null, ...describeSubscription(c.get("subscription")) }),
  );
  hono.post("/api/render", async (c) => {
    const { status, body } = await render();
    return c.json(body as object, status);
  });
  const honoServer = await serveApp(hono);
  servers.push(honoServer);
  urls.hono = honoServer.url;

  const app = express();
  app.use("/api", expressPaymentGate(gate));
  app.get("/api/{*rest}", (_req, res) => {
    res.json(describeSubscription(res.locals.subscription as ServedSubscription | undefined));
  });
  app.post("/api/render", (_req, res, next) => {
    render()
      .then(({ status, body }) => res.status(status).json(body))
      .catch(next);
  });
  const expressServer = createServer(app);
  await new Promise<void>((resolve) => expressServer.listen(0, "127.0.0.1", resolve));
  urls.express = `http://127.0.0.1:${(expressServer.address() as AddressInfo).port}`;
  servers.push({
    url: urls.express,
    close: () => new Promise<void>((resolve) => expressServer.close(() => resolve())),
  } as RunningServer);

  const nodeServer = createServer(
    nodePaymentGate(
      gate,
      async (req, res, _payment, subscription) => {
        const { status, body } =
          req.method === "POST" ? await render() : { status: 200, body: describeSubscription(subscription) };
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
      },
      { prefix: "/api" },
    ),
  );
  await new Promise<void>((resolve) => nodeServer.listen(0, "127.0.0.1", resolve));
  urls.node = `http://127.0.0.1:${(nodeServer.address() as AddressInfo).port}`;
  servers.push({
    url: urls.node,
    close: () => new Promise<void>((resolve) => nodeServer.close(() => resolve())),
  } as RunningServer);
}, 120_000);

afterAll(async () => {
  await gate?.close();
  for (const server of servers) await server.close();
  await receiver?.close();
  await tf?.stop();
  await devnet?.stop();
});

async function offered(url: string): Promise<PaymentRequired> {
  const response = await fetch(url);
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

/** Pays the 402's one-time option through the facilitator's `/authorize`; the proof it returns. */
async function payOnce(body: PaymentRequired): Promise<PaymentProof> {
  const option = body.accepts.find((o) => o.scheme === "exact")!;
  const signedPayment = await signTestPayment(devnet, buyer, {
    payTo: option.payTo,
    amount: BigInt(option.amount),
    memo: option.memo,
  });
  const response = await post("/authorize", { signedPayment });
  expect(response.status).toBe(200);
  return AuthorizeResponseSchema.parse(await response.json()).proof;
}

describe("the specification's gate operations, called as written", () => {
  it("paymentGate({ pricing: [subscription plan, one-time amount 500000] }) on a prefix offers the plan and 0.50 USDC", async () => {
    for (const base of Object.values(urls)) {
      const body = await offered(`${base}/api/report`);
      expect(body.accepts.map((o) => [o.scheme, o.amount])).toEqual([
        ["subscription", PRICE.toString()],
        ["exact", "500000"],
      ]);
      expect(body.accepts[0]!.tollgate).toMatchObject({
        planId: planId.toString(),
        subscriptionScheme: true,
      });
    }
    // Outside the prefix nothing is priced.
    expect((await fetch(`${urls.node}/health`)).status).toBe(200);
  });

  it("parsePaymentProof(headerValue) and verifyPaymentProof(proof): by the gate, by the facilitator's keys, and on chain", async () => {
    const proof = await payOnce(await offered(`${urls.hono}/api/report`));
    const headerValue = encodeJsonHeader(proof);

    expect(parsePaymentProof(headerValue)).toEqual(proof);
    expect(() => parsePaymentProof("not a proof")).toThrow(TollgateError);

    expect(await gate.verifyPaymentProof(proof)).toBe(true);
    const { verifyPaymentProof: verifyWithFacilitator } = createProofVerifier({ facilitator: tf.url, fetch });
    expect(await verifyWithFacilitator(proof)).toBe(true);
    expect(await verifyPaymentProof(proof, { publicClient: devnet.publicClient })).toBe(true);
    // The same transaction does not pay other terms.
    const inflated = { ...proof, amount: "5000000" };
    expect(await verifyPaymentProof(inflated, { publicClient: devnet.publicClient })).toBe(false);
    expect(await verifyWithFacilitator(inflated)).toBe(false);
    expect(await gate.verifyPaymentProof(inflated)).toBe(false);

    // verifyPaymentProof consumes nothing: the proof still buys its request once.
    const paid = await fetch(`${urls.hono}/api/report`, { headers: { "x-payment": headerValue } });
    expect(paid.status).toBe(200);
    expect(await paid.json()).toMatchObject({ paidBy: buyer.address });
    expect((await fetch(`${urls.hono}/api/report`, { headers: { "x-payment": headerValue } })).status).toBe(
      402,
    );
  });

  it("buildPaymentRequired({ plan: planId }) builds a complete 402 body from the configured gate", async () => {
    const body = await gate.buildPaymentRequired({ plan: planId.toString() });
    expect(PaymentRequiredSchema.parse(body)).toEqual(body);
    expect(body).toMatchObject({ version: "1", error: "PaymentRequired" });
    expect(body.accepts).toEqual([
      expect.objectContaining({
        scheme: "subscription",
        network: devnet.network,
        token: devnet.contracts.usd,
        amount: PRICE.toString(),
        payTo: provider.address,
        tollgate: expect.objectContaining({
          planId: planId.toString(),
          interval: 30 * DAY,
          subscriptionScheme: true,
          facilitator: tf.url,
          manager: devnet.contracts.subscriptionManager,
          overage: { unitPrice: UNIT.toString(), includedUnits: Number(INCLUDED) },
        }),
      }),
    ]);
    // The free function takes the gate as its second argument; without one it says so, typed.
    const free = await buildPaymentRequired({ plan: planId.toString() }, gate);
    expect(free.accepts[0]!.tollgate?.planId).toBe(planId.toString());
    await expect(buildPaymentRequired({ plan: planId.toString() })).rejects.toMatchObject({
      code: "InvalidRequest",
      details: { reason: "no_gate" },
    });
  });

  it("handlers read the subscription in every adapter, deductAllowance charges it, and the cap refusal reaches a webhook once", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 20_000_000n });
    const payer: Payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
    // Cap 0.03 USDC: one metered unit past the included two, and two deductions of 0.01.
    const subscriptionId = await payer.subscribe({ planId, maxOverage: "0.03" });
    const headers = await payer.subscriptionHeaders(subscriptionId, PUBLIC_ORIGIN);
    const balanceOf = (owner: Address) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const subscriberBefore = await balanceOf(account.address);
    const providerBefore = await balanceOf(provider.address);
    const read = async (base: string) => {
      const response = await fetch(`${base}/api/report`, { headers });
      expect(response.status).toBe(200);
      return ((await response.json()) as { subscription: Record<string, unknown> }).subscription;
    };
    const expected = (unitsUsed: number, charge: bigint) => ({
      subscriptionId: subscriptionId.toString(),
      planId: planId.toString(),
      subscriber: account.address,
      units: 1,
      unitsUsed: String(unitsUsed),
      charge: charge.toString(),
    });
    expect(await read(urls.hono)).toEqual(expected(1, 0n));
    expect(await read(urls.express)).toEqual(expected(2, 0n));
    expect(await read(urls.node)).toEqual(expected(3, UNIT));

    const renderAt = (base: string) => fetch(`${base}/api/render`, { method: "POST", headers });
    for (const base of [urls.hono, urls.express]) {
      const response = await renderAt(base);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ deducted: "10000" });
    }
    // The cap (0.03) is used up: deductAllowance and metered calls are refused, in every adapter.
    const refused = await renderAt(urls.node);
    expect(refused.status).toBe(402);
    expect(await refused.json()).toMatchObject({ error: "AllowanceExhausted" });
    for (const base of Object.values(urls)) {
      const response = await fetch(`${base}/api/report`, { headers });
      expect(response.status).toBe(402);
      expect(PaymentRequiredSchema.parse(await response.json()).error).toBe("AllowanceExhausted");
    }
    await gate.flushUsage();

    // What was charged reaches the chain: one metered unit past the included two (0.01) and the two
    // deductions (0.01 each), pulled from the subscriber to the provider by the facilitator's batches.
    let summary: UsageSummary | undefined;
    for (let i = 0; i < 300; i++) {
      const response = await fetch(`${tf.url}/usage?subscriptionId=${subscriptionId}`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      summary = UsageSummarySchema.parse(await response.json());
      if (summary.unsettled.count === 0 && summary.recorded.count > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(summary).toMatchObject({
      settled: { amount: "30000" },
      unsettled: { count: 0 },
      failed: { count: 0 },
    });
    const onChain = await getSubscription(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      subscriptionId,
    });
    expect(onChain.overageUsed).toBe(3n * UNIT);
    expect(await balanceOf(account.address)).toBe(subscriberBefore - 3n * UNIT);
    expect(await balanceOf(provider.address)).toBe(providerBefore + 3n * UNIT);

    // The facilitator emitted allowance.exhausted once for this cycle, and a webhook delivered it.
    let delivered: WebhookEvent[] = [];
    for (let i = 0; i < 300 && delivered.length === 0; i++) {
      delivered = receiver.received
        .map((r) =>
          verifyWebhook(webhookSecret, r.headers as Record<string, string>, r.body, { clock: systemClock }),
        )
        .filter(
          (e) => e.type === "allowance.exhausted" && e.data.subscriptionId === subscriptionId.toString(),
        );
      if (delivered.length === 0) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.data).toMatchObject({
      subscriptionId: subscriptionId.toString(),
      planId: planId.toString(),
      subscriber: account.address,
      provider: provider.address,
      source: "gate",
    });

    // Another report of this cycle (another gate instance, say) records nothing more.
    const again = await post("/usage/exhausted", { subscriptionId: subscriptionId.toString() }, apiKey);
    expect(again.status).toBe(202);
    expect(UsageExhaustedResponseSchema.parse(await again.json())).toEqual({ recorded: false });
    const feed = EventFeedResponseSchema.parse(
      await (
        await fetch(`${tf.url}/events?types=allowance.exhausted&provider=${provider.address}&limit=100`, {
          headers: { authorization: `Bearer ${apiKey}` },
        })
      ).json(),
    );
    expect(feed.events.filter((e) => e.data.subscriptionId === subscriptionId.toString())).toHaveLength(1);

    // Only the subscription's provider may report it.
    const stranger = await post(
      "/usage/exhausted",
      { subscriptionId: subscriptionId.toString() },
      otherApiKey,
    );
    expect(stranger.status).toBe(400);
    expect(await stranger.json()).toMatchObject({ error: { details: { reason: "not_your_subscription" } } });
    expect((await post("/usage/exhausted", { subscriptionId: subscriptionId.toString() })).status).toBe(401);
  });

  it("deductAllowance outside a subscribed request is a typed error, not a TypeError", async () => {
    await expect(deductAllowance(10_000)).rejects.toMatchObject({
      code: "InvalidRequest",
      details: { reason: "no_subscription" },
    });
  });
});
