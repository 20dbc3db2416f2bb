/**
 * The one-time flow end to end (docs/protocol.md; docs/gate.md; docs/client.md): a real anvil devnet with Tollgate's
 * contracts, a real facilitator over HTTP, gates behind each adapter (Hono, Express, node:http) on
 * real sockets, and a payer using `fetchWithPayment` with the global `fetch`.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import express from "express";
import { Hono } from "hono";
import type { Address, Hash } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import type { Devnet, DevnetAccount } from "../src/chain/startDevnet.ts";
import { startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { expressPaymentGate } from "../src/gate/expressPaymentGate.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { nodePaymentGate } from "../src/gate/nodePaymentGate.ts";
import { type PaymentGate, paymentGate } from "../src/gate/paymentGate.ts";
import type { PaymentGateOptions } from "../src/gate/paymentGateOptions.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { decodeJsonHeader } from "../src/protocol/header.ts";
import { PaymentResponseSchema } from "../src/protocol/paymentProof.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const ROUTES = {
  "GET /api/reports/:id": { price: "0.50", description: "one report" },
  "POST /api/summarize": { amount: 50_000n },
  "GET /api/expensive": { price: "25" },
  "GET /api/flaky/:id": { price: "0.25" },
} satisfies PaymentGateOptions["routes"];

let devnet: Devnet;
let tf: TestFacilitator;
let buyer: DevnetAccount;
let payer: Payer;
const servers: { close(): Promise<void> }[] = [];

function gateFor(payTo: Address, extra: Partial<PaymentGateOptions> = {}): PaymentGate {
  return paymentGate({
    payTo,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch,
    memoSecret: randomBytes(32),
    routes: ROUTES,
    ...extra,
  });
}

/** A report and a summary, as the paid API serves them. */
const resource = {
  report: (id: string, payer: string | undefined) => ({ report: id, paidBy: payer }),
  summary: (text: string) => ({ summary: text.slice(0, 5) }),
  /** Throws on its first run for an id (an upstream outage), and serves every later run. */
  flaky: (id: string) => {
    const runs = (flakyRuns.get(id) ?? 0) + 1;
    flakyRuns.set(id, runs);
    if (runs === 1) throw new Error("the report store is unreachable");
    return { flaky: id, runs };
  },
};
const flakyRuns = new Map<string, number>();

async function serveHono(gate: PaymentGate): Promise<string> {
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/reports/:id", (c) => c.json(resource.report(c.req.param("id"), c.get("payment")?.payer)));
  app.post("/api/summarize", async (c) => c.json(resource.summary(await c.req.text())));
  app.get("/api/expensive", (c) => c.json({ gold: true }));
  app.get("/api/flaky/:id", (c) => c.json(resource.flaky(c.req.param("id"))));
  app.onError((_error, c) =>
    c.json({ error: { code: "Internal", message: "the report store is unreachable" } }, 500),
  );
  const server: RunningServer = await serveApp(app);
  servers.push(server);
  return server.url;
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function serveExpress(gate: PaymentGate): Promise<string> {
  const app = express();
  app.use(express.text());
  app.use("/api", expressPaymentGate(gate));
  app.get("/api/reports/:id", (req, res) => {
    res.json(resource.report(req.params.id, res.locals.payment?.payer));
  });
  app.post("/api/summarize", (req, res) => {
    res.json(resource.summary(String(req.body)));
  });
  app.get("/api/expensive", (_req, res) => {
    res.json({ gold: true });
  });
  app.get("/api/flaky/:id", (req, res) => {
    res.json(resource.flaky(req.params.id));
  });
  app.use((_error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(500).json({ error: { code: "Internal", message: "the report store is unreachable" } });
  });
  return listen(createServer(app));
}

async function serveNode(gate: PaymentGate): Promise<string> {
  return listen(
    createServer(
      nodePaymentGate(
        gate,
        async (req, res, payment) => {
          const path = new URL(req.url ?? "/", "http://x").pathname;
          let body: unknown;
          if (req.method === "POST" && path === "/api/summarize") {
            const chunks: Buffer[] = [];
            for await (const chunk of req) chunks.push(chunk as Buffer);
            body = resource.summary(Buffer.concat(chunks).toString("utf8"));
          } else if (path.startsWith("/api/flaky/")) {
            body = resource.flaky(path.slice("/api/flaky/".length));
          } else if (path.startsWith("/api/reports/")) {
            body = resource.report(path.slice("/api/reports/".length), payment?.payer);
          } else {
            body = { gold: true };
          }
          res.setHeader("content-type", "application/json");
          res.end(JSON.stringify(body));
        },
        { prefix: "/api" },
      ),
    ),
  );
}

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address;

async function refusal(promise: Promise<unknown>): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error("expected a TollgateError");
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  buyer = devnet.accounts[1]!;
  payer = createPayer({ account: buyer.account, network: devnet.network, facilitator: tf.url, fetch });
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await tf?.stop();
  await devnet?.stop();
});

describe.each([
  ["Hono", serveHono],
  ["Express", serveExpress],
  ["node:http", serveNode],
] as const)("one-time payment through the %s adapter", (name, serve) => {
  let base: string;
  let payTo: Address;
  beforeAll(async () => {
    payTo = freshAddress();
    base = await serve(gateFor(payTo));
  });

  it("answers an unpaid request with a 402 carrying Tollgate terms and an x402 PAYMENT-REQUIRED header", async () => {
    const response = await fetch(`${base}/api/reports/42`);
    expect(response.status).toBe(402);
    const body = PaymentRequiredSchema.parse(await response.json());
    expect(body.error).toBe("PaymentRequired");
    expect(body.accepts).toEqual([
      expect.objectContaining({ scheme: "exact", amount: "500000", payTo, token: devnet.contracts.usd }),
    ]);
    expect(body.accepts[0]?.tollgate?.facilitator).toBe(tf.url);
    // The token's EIP-712 domain came from the facilitator's /supported.
    const x402 = decodePaymentRequiredHeader(response.headers.get("payment-required")!);
    expect(x402.accepts[0]).toMatchObject({ amount: "500000", extra: { name: "USD Coin", version: "2" } });
  });

  it("pays the 402 and gets the resource, moving exactly the price on chain", async () => {
    const before = { buyer: await balanceOf(buyer.address), payTo: await balanceOf(payTo) };
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1.00" });
    const response = await paidFetch(`${base}/api/reports/42`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ report: "42", paidBy: buyer.address });

    const receipt = decodeJsonHeader(response.headers.get("x-payment-response")!, PaymentResponseSchema);
    expect(receipt).toMatchObject({ success: true, network: devnet.network, payer: buyer.address });
    const mined = await devnet.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hash });
    expect(mined.status).toBe("success");

    expect(await balanceOf(buyer.address)).toBe(before.buyer - 500_000n);
    expect(await balanceOf(payTo)).toBe(before.payTo + 500_000n);
  });

  it("pays for a POST and the handler reads the body the client sent", async () => {
    const before = await balanceOf(payTo);
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: 50_000n });
    const response = await paidFetch(`${base}/api/summarize`, {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: "tollgate summarizes",
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ summary: "tollg" });
    expect(await balanceOf(payTo)).toBe(before + 50_000n);
  });

  it("refuses the same proof a second time, without another transfer", async () => {
    const unpaid = PaymentRequiredSchema.parse(await (await fetch(`${base}/api/reports/7`)).json());
    const { header } = await payer.pay(unpaid.accepts[0]!, { maxAmount: "1" });
    const first = await fetch(`${base}/api/reports/7`, { headers: { "X-PAYMENT": header } });
    expect(first.status).toBe(200);
    const balance = await balanceOf(payTo);
    const second = await fetch(`${base}/api/reports/7`, { headers: { "X-PAYMENT": header } });
    expect(second.status).toBe(402);
    expect(PaymentRequiredSchema.parse(await second.json()).error).toBe("InvalidPaymentProof");
    expect(await balanceOf(payTo)).toBe(balance);
  });

  it("serves a request whose handler failed once for one payment, re-sending the same proof", async () => {
    const id = `${name.replace(/\W/g, "")}-${randomBytes(4).toString("hex")}`;
    const before = { buyer: await balanceOf(buyer.address), payTo: await balanceOf(payTo) };
    const payments: string[] = [];
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: "1.00",
      onPayment: (receipt) => payments.push(receipt.header),
    });
    const response = await paidFetch(`${base}/api/flaky/${id}`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ flaky: id, runs: 2 });
    expect(payments).toHaveLength(1);
    expect(await balanceOf(buyer.address)).toBe(before.buyer - 250_000n);
    expect(await balanceOf(payTo)).toBe(before.payTo + 250_000n);
    // Served now: the proof is used up.
    const replay = await fetch(`${base}/api/flaky/${id}`, { headers: { "X-PAYMENT": payments[0]! } });
    expect(replay.status).toBe(402);
    expect(flakyRuns.get(id)).toBe(2);
  });

  it("refuses an expensive route at the price ceiling, paying nothing", async () => {
    const before = await balanceOf(buyer.address);
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1.00" });
    const error = await refusal(paidFetch(`${base}/api/expensive`));
    expect(error.code).toBe("PriceCeilingExceeded");
    expect(await balanceOf(buyer.address)).toBe(before);
  });
});

describe("one-time payment failures and variants", () => {
  it("surfaces InsufficientFunds from the facilitator as a typed error, and nothing is served", async () => {
    const payTo = freshAddress();
    const base = await serveHono(gateFor(payTo));
    const broke = privateKeyToAccount(generatePrivateKey());
    const brokePayer = createPayer({ account: broke, network: devnet.network, facilitator: tf.url, fetch });
    const paidFetch = fetchWithPayment(fetch, brokePayer, { maxPrice: "1" });
    const error = await refusal(paidFetch(`${base}/api/reports/1`));
    expect(error.code).toBe("InsufficientFunds");
    expect(error.status).toBe(402);
    expect(await balanceOf(payTo)).toBe(0n);
  });

  it("verifies proofs remotely through the facilitator's /verify when configured so", async () => {
    const payTo = freshAddress();
    const base = await serveHono(gateFor(payTo, { proofVerification: "remote" }));
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1" });
    const response = await paidFetch(`${base}/api/reports/remote`);
    expect(response.status).toBe(200);
    expect(await balanceOf(payTo)).toBe(500_000n);
  });

  it("accepts a facilitator client object and pinned proof keys", async () => {
    const payTo = freshAddress();
    const client = createFacilitatorClient({ url: tf.url, fetch });
    const base = await serveExpress(
      gateFor(payTo, {
        facilitator: client,
        proofKeys: await client.jwks(),
        token: { address: devnet.contracts.usd, name: "USD Coin", version: "2" },
      }),
    );
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1" });
    expect((await paidFetch(`${base}/api/reports/pinned`)).status).toBe(200);
    expect(await balanceOf(payTo)).toBe(500_000n);
  });
});
