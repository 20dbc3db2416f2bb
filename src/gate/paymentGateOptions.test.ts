import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { TollgateError } from "../protocol/errors.ts";
import { PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import { honoPaymentGate } from "./honoPaymentGate.ts";
import { paymentGate } from "./paymentGate.ts";
import type { PaymentGateOptions } from "./paymentGateOptions.ts";

const base = {
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  network: "eip155:31337",
  token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.test",
  memoSecret: "a-test-memo-secret-that-is-at-least-32-bytes-long",
  fetch: (async (input) => {
    throw new Error(`unexpected fetch of ${String(input)}`);
  }) satisfies FetchFn,
} as const;

/** The amounts of the 402 a gate with `options` answers on `/api/x`. */
async function offeredAmounts(options: Partial<PaymentGateOptions>): Promise<string[]> {
  const app = new Hono();
  app.use("/api/*", honoPaymentGate(paymentGate({ ...base, ...options } as PaymentGateOptions)));
  app.get("/api/*", (c) => c.text("paid"));
  const response = await app.request("/api/x");
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json()).accepts.map((option) => option.amount);
}

function startupError(options: Partial<PaymentGateOptions>): TollgateError {
  try {
    paymentGate({ ...base, ...options } as PaymentGateOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(TollgateError);
    expect((error as TollgateError).code).toBe("InvalidRequest");
    return error as TollgateError;
  }
  throw new Error("the gate started");
}

describe("gate pricing: amount is smallest units, price is token text", () => {
  it("reads amount as smallest units whether a number, a bigint or an integer string", async () => {
    expect(
      await offeredAmounts({
        pricing: [
          { type: "one-time", amount: 500000 },
          { type: "one-time", amount: 500_000n },
          { type: "one-time", amount: "500000" },
        ],
      }),
    ).toEqual(["500000", "500000", "500000"]);
  });

  it("reads price as decimal token text", async () => {
    expect(await offeredAmounts({ pricing: [{ type: "one-time", price: "0.50" }] })).toEqual(["500000"]);
    expect(await offeredAmounts({ routes: { "GET /api/x": { price: "0.50" } } })).toEqual(["500000"]);
    expect(await offeredAmounts({ routes: { "GET /api/x": { amount: 500000 } } })).toEqual(["500000"]);
  });

  it("refuses decimal text under amount at start-up, naming both readings", () => {
    const error = startupError({ pricing: [{ type: "one-time", amount: "0.50" }] });
    expect(error.message).toContain(
      'pricing.0.amount: amount "0.50" is not an integer number of smallest units; for 0.50 USDC write price: "0.50"',
    );
    expect(startupError({ routes: { "GET /api/x": { amount: "0.50" } } }).message).toContain(
      'for 0.50 USDC write price: "0.50"',
    );
  });

  it("refuses a non-integer or unsafe number under amount", () => {
    expect(startupError({ pricing: [{ type: "one-time", amount: 0.5 }] }).message).toContain(
      'amount 0.5 is not an integer number of smallest units; for 0.5 USDC write price: "0.5"',
    );
    expect(startupError({ pricing: [{ type: "one-time", amount: 2 ** 60 }] }).message).toMatch(
      /not a safe integer.*bigint or an integer string/,
    );
  });

  it("refuses both readings at once, or a bigint or number under price", () => {
    expect(startupError({ pricing: [{ type: "one-time", amount: 500000, price: "0.50" }] }).message).toMatch(
      /exactly one of `amount` \(smallest units: 500000\) and `price` \(token text: "0.50"\)/,
    );
    expect(startupError({ routes: { "GET /api/x": { amount: 1, price: "1" } } }).message).toMatch(
      /exactly one of `pricing`, `amount`/,
    );
    expect(
      startupError({ pricing: [{ type: "one-time", price: 500_000n as unknown as string }] }).message,
    ).toContain("price 500000n is a bigint, but price is decimal token text");
    expect(
      startupError({ pricing: [{ type: "one-time", price: 0.5 as unknown as string }] }).message,
    ).toContain('prices are never floats: write price: "0.5"');
  });

  it("refuses zero, negative and malformed amounts", () => {
    expect(startupError({ pricing: [{ type: "one-time", amount: 0 }] }).message).toMatch(/positive/);
    expect(startupError({ pricing: [{ type: "one-time", amount: -5 }] }).message).toMatch(/positive|amount/);
    expect(startupError({ pricing: [{ type: "one-time", amount: "5e5" }] }).message).toMatch(
      /not an integer number of smallest units/,
    );
  });
});

describe("trustedProxies", () => {
  it("refuses an entry that is not an IP address at start-up, and takes IPv4 and IPv6 addresses", () => {
    expect(
      startupError({ pricing: [{ type: "one-time", amount: 5 }], trustedProxies: ["proxy.internal"] })
        .message,
    ).toMatch(/trustedProxies/);
    expect(() =>
      paymentGate({
        ...base,
        pricing: [{ type: "one-time", amount: 5 }],
        trustedProxies: ["10.0.0.1", "fd00::1"],
      }),
    ).not.toThrow();
  });
});
