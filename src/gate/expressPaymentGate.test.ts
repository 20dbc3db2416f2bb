import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signProofFor } from "../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../facilitator/proofKeys.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { decodeJsonHeader, encodeJsonHeader } from "../protocol/header.ts";
import { PaymentResponseSchema } from "../protocol/paymentProof.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import { expressPaymentGate } from "./expressPaymentGate.ts";
import { type GatePayment, paymentGate } from "./paymentGate.ts";

const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const PAYER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const TX = `0x${"cd".repeat(32)}` as const;
const key = proofKeyFromSeed(new Uint8Array(32).fill(3));
const clock = createFixedClock(1_763_800_000_000);

const gate = paymentGate({
  payTo: PAY_TO,
  network: "eip155:31337",
  token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.test",
  fetch: async () => {
    throw new Error("no network in unit tests");
  },
  memoSecret: "express-adapter-test-secret-of-32-bytes-or-more",
  clock,
  proofKeys: jwksOf([key]),
  routes: {
    "POST /api/echo": { price: "0.25" },
    "GET /api/reports/:id": { price: "1" },
    "GET /api/flaky/:id": { price: "0.01" },
    "GET /api/status/:code": { price: "0.01" },
  },
});

const served: (GatePayment | undefined)[] = [];
const app = express();
app.use(express.json());
app.use("/api", expressPaymentGate(gate));
app.post("/api/echo", (req, res) => {
  served.push(res.locals.payment as GatePayment | undefined);
  res.json({ echo: req.body });
});
app.get("/api/reports/:id", (req, res) => {
  served.push(res.locals.payment as GatePayment | undefined);
  res.json({ report: req.params.id });
});
/** Runs per path of /api/flaky: the first run throws, later ones answer. */
const flakyRuns = new Map<string, number>();
app.get("/api/flaky/:id", (req, res) => {
  const runs = (flakyRuns.get(req.params.id) ?? 0) + 1;
  flakyRuns.set(req.params.id, runs);
  if (runs === 1) throw new Error("the handler's upstream is down");
  res.json({ runs });
});
app.get("/api/status/:code", (req, res) => {
  res.status(Number(req.params.code)).json({ status: Number(req.params.code) });
});
app.get("/api/free", (_req, res) => {
  served.push(res.locals.payment as GatePayment | undefined);
  res.json({ free: true });
});

// Express's own error handler answers a thrown error with a bare 500; keep it off the test output.
app.use((_error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
  res.status(500).json({ error: { code: "Internal", message: "handler failed" } });
});

let server: Server;
let base: string;
beforeAll(async () => {
  server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

function proofHeader(body: PaymentRequired): string {
  return encodeJsonHeader(signProofFor(key, body.accepts[0]!, unixSeconds(clock), { payer: PAYER, tx: TX }));
}

describe("expressPaymentGate", () => {
  it("answers an unpaid request with the gate's 402 and its headers", async () => {
    const response = await fetch(`${base}/api/reports/9`);
    expect(response.status).toBe(402);
    expect(response.headers.get("payment-required")).not.toBeNull();
    expect(response.headers.get("cache-control")).toBe("no-store");
    const body = PaymentRequiredSchema.parse(await response.json());
    expect(body.accepts[0]?.amount).toBe("1000000");
    // No publicOrigin configured: the path alone, never an origin taken from the request's Host.
    expect(body.accepts[0]?.resource).toBe("/api/reports/9");
  });

  it("lets a paid POST through with its body intact, the payment in res.locals and X-PAYMENT-RESPONSE", async () => {
    const unpaid = await fetch(`${base}/api/echo`, { method: "POST" });
    const body = PaymentRequiredSchema.parse(await unpaid.json());
    served.length = 0;
    const header = proofHeader(body);
    const paid = await fetch(`${base}/api/echo`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-payment": header },
      body: JSON.stringify({ hello: "world" }),
    });
    expect(paid.status).toBe(200);
    expect(await paid.json()).toEqual({ echo: { hello: "world" } });
    expect(decodeJsonHeader(paid.headers.get("x-payment-response")!, PaymentResponseSchema)).toMatchObject({
      success: true,
      transaction: TX,
      payer: PAYER,
    });
    expect(served).toEqual([expect.objectContaining({ payer: PAYER, amount: 250_000n })]);

    const replay = await fetch(`${base}/api/echo`, { method: "POST", headers: { "x-payment": header } });
    expect(replay.status).toBe(402);
    expect(PaymentRequiredSchema.parse(await replay.json()).error).toBe("InvalidPaymentProof");
    expect(served).toHaveLength(1);
  });

  it("accepts the same proof again after the handler threw, and serves it", async () => {
    const unpaid = await fetch(`${base}/api/flaky/1`);
    const header = proofHeader(PaymentRequiredSchema.parse(await unpaid.json()));
    const failed = await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } });
    expect(failed.status).toBe(500);
    const retry = await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } });
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ runs: 2 });
    const replay = await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } });
    expect(replay.status).toBe(402);
    expect(flakyRuns.get("1")).toBe(2);
  });

  it.each([
    [503, 503],
    [404, 402],
    [200, 402],
  ])("after the handler answered %i, the same proof is answered %i", async (status, next) => {
    const unpaid = await fetch(`${base}/api/status/${status}`);
    const header = proofHeader(PaymentRequiredSchema.parse(await unpaid.json()));
    expect((await fetch(`${base}/api/status/${status}`, { headers: { "x-payment": header } })).status).toBe(
      status,
    );
    expect((await fetch(`${base}/api/status/${status}`, { headers: { "x-payment": header } })).status).toBe(
      next,
    );
  });

  it("passes requests no route prices to the handler without a payment", async () => {
    served.length = 0;
    const response = await fetch(`${base}/api/free`);
    expect(response.status).toBe(200);
    expect(response.headers.get("x-payment-response")).toBeNull();
    expect(served).toEqual([undefined]);
  });
});
