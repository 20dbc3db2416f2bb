import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { text } from "node:stream/consumers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signProofFor } from "../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../facilitator/proofKeys.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { encodeJsonHeader } from "../protocol/header.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import { nodePaymentGate } from "./nodePaymentGate.ts";
import { type GatePayment, paymentGate } from "./paymentGate.ts";

const PAYER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const key = proofKeyFromSeed(new Uint8Array(32).fill(5));
const clock = createFixedClock(1_763_800_000_000);

const gate = paymentGate({
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  network: "eip155:31337",
  token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.test",
  fetch: async () => {
    throw new Error("no network in unit tests");
  },
  memoSecret: "node-adapter-test-secret-of-at-least-32-bytes",
  clock,
  proofKeys: jwksOf([key]),
  pricing: [{ type: "one-time", price: "0.10" }],
});

const served: { path: string | undefined; payment: GatePayment | undefined; body: string }[] = [];
const errors: unknown[] = [];
/** Runs per path of /api/flaky/…: the first run throws, later ones answer. */
const flakyRuns = new Map<string, number>();
let server: Server;
let base: string;

beforeAll(async () => {
  server = createServer(
    nodePaymentGate(
      gate,
      async (req, res, payment) => {
        if (req.url === "/api/boom") throw new Error("handler failed");
        if (req.url?.startsWith("/api/flaky/")) {
          const runs = (flakyRuns.get(req.url) ?? 0) + 1;
          flakyRuns.set(req.url, runs);
          if (runs === 1) throw new Error("the handler's upstream is down");
        }
        const status = /^\/api\/status\/(\d{3})$/.exec(req.url ?? "")?.[1];
        if (status !== undefined) res.statusCode = Number(status);
        served.push({ path: req.url, payment, body: await text(req) });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ ok: true }));
      },
      { prefix: "/api/", onError: (error) => errors.push(error) },
    ),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

function proofHeader(body: PaymentRequired): string {
  return encodeJsonHeader(signProofFor(key, body.accepts[0]!, unixSeconds(clock), { payer: PAYER }));
}

describe("nodePaymentGate", () => {
  it("gates paths under the prefix: 402, then the handler with the payment and the request body", async () => {
    // The memo binds the query, so the 402 is asked for the very request that is then paid.
    const unpaid = await fetch(`${base}/api/data?x=1`, { method: "PUT", body: "abc" });
    expect(unpaid.status).toBe(402);
    expect(unpaid.headers.get("payment-required")).not.toBeNull();
    const offer = PaymentRequiredSchema.parse(await unpaid.json());
    expect(served).toHaveLength(0);

    const paid = await fetch(`${base}/api/data?x=1`, {
      method: "PUT",
      headers: { "x-payment": proofHeader(offer) },
      body: "abc",
    });
    expect(paid.status).toBe(200);
    expect(paid.headers.get("x-payment-response")).not.toBeNull();
    expect(served).toEqual([
      {
        path: "/api/data?x=1",
        payment: expect.objectContaining({ payer: PAYER, amount: 100_000n }),
        body: "abc",
      },
    ]);
  });

  it("sends paths outside the prefix straight to the handler", async () => {
    served.length = 0;
    for (const path of ["/", "/apiary", "/health"]) {
      const response = await fetch(`${base}${path}`);
      expect(response.status).toBe(200);
    }
    expect(served.map((s) => [s.path, s.payment])).toEqual([
      ["/", undefined],
      ["/apiary", undefined],
      ["/health", undefined],
    ]);
  });

  it("answers 500 without details when the handler throws, and reports the error", async () => {
    const unpaid = await fetch(`${base}/api/boom`);
    const paid = await fetch(`${base}/api/boom`, {
      headers: { "x-payment": proofHeader(PaymentRequiredSchema.parse(await unpaid.json())) },
    });
    expect(paid.status).toBe(500);
    expect(await paid.text()).toBe("");
    expect(errors).toEqual([expect.objectContaining({ message: "handler failed" })]);
  });

  it("accepts the same proof again after the handler threw, and serves it", async () => {
    const unpaid = await fetch(`${base}/api/flaky/1`);
    const header = proofHeader(PaymentRequiredSchema.parse(await unpaid.json()));
    expect((await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } })).status).toBe(500);
    const retry = await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } });
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ ok: true });
    expect((await fetch(`${base}/api/flaky/1`, { headers: { "x-payment": header } })).status).toBe(402);
    expect(flakyRuns.get("/api/flaky/1")).toBe(2);
  });

  it.each([
    [502, 502],
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

  it("refuses a prefix that is not a path", () => {
    expect(() => nodePaymentGate(gate, () => undefined, { prefix: "api" })).toThrow(/prefix/);
  });
});
