import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isTollgateError, type TollgateError } from "../protocol/errors.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import type { X402PaymentRequired } from "../protocol/x402.ts";
import { createTestStore } from "../store/createTestStore.ts";
import {
  checkPaymentRequired,
  checkPinnedPayee,
  checkX402PaymentRequired,
  createPayeePins,
  createStoredPayeePins,
  listingOf,
} from "./offerCheck.ts";

const PAY_TO = "0x2222222222222222222222222222222222222222";
const OTHER = "0x3333333333333333333333333333333333333333";
const TOKEN = "0x4444444444444444444444444444444444444444";
const MANAGER = "0x5555555555555555555555555555555555555555";
const MEMO = `eyJ0IjoxfQ.${"A".repeat(43)}`;
const NETWORK = "eip155:31337";

const listing = listingOf(
  { seller: { payTo: PAY_TO }, network: NETWORK, token: TOKEN },
  [
    { type: "one-time", amount: "10000" },
    {
      type: "metered",
      planId: "3",
      amount: "9000000",
      interval: 2_592_000,
      includedUnits: 1000,
      overageUnitPrice: "1000",
      unitsPerCall: 1,
      manager: MANAGER,
    },
  ],
  "market",
);

function exact(overrides: Record<string, unknown> = {}) {
  return {
    scheme: "exact",
    network: NETWORK,
    token: TOKEN,
    amount: "10000",
    payTo: PAY_TO,
    memo: MEMO,
    ...overrides,
  };
}

function subscription(overrides: Record<string, unknown> = {}, tollgate: Record<string, unknown> = {}) {
  return {
    scheme: "subscription",
    network: NETWORK,
    token: TOKEN,
    amount: "9000000",
    payTo: PAY_TO,
    memo: MEMO,
    tollgate: {
      planId: "3",
      interval: 2_592_000,
      subscriptionScheme: true,
      facilitator: "http://127.0.0.1:4020",
      manager: MANAGER,
      overage: { unitPrice: "1000", includedUnits: 1000 },
      ...tollgate,
    },
    ...overrides,
  };
}

function body(...accepts: Record<string, unknown>[]): PaymentRequired {
  return PaymentRequiredSchema.parse({ version: "1", error: "PaymentRequired", message: "pay", accepts });
}

function refusal(run: () => unknown): TollgateError {
  try {
    run();
  } catch (error) {
    if (isTollgateError(error, "OfferMismatch")) return error;
    throw error;
  }
  throw new Error("expected OfferMismatch");
}

describe("checkPaymentRequired", () => {
  it("passes a 402 that asks what was listed, or less", () => {
    const asked = body(exact({ amount: "9000" }), subscription({ amount: "8000000" }));
    expect(checkPaymentRequired(asked, listing, "forecast").accepts).toHaveLength(2);
  });

  it("refuses a one-time price above the listing, naming both in USDC", () => {
    const error = refusal(() => checkPaymentRequired(body(exact({ amount: "90000" })), listing, "forecast"));
    expect(error.details).toMatchObject({
      field: "price",
      listed: "0.01 USDC",
      asked: "0.09 USDC",
      seller: PAY_TO,
    });
    expect(error.message).toContain("forecast: the seller's 402 asks price 0.09 USDC");
    expect(error.message).toContain("market listing says 0.01 USDC");
  });

  it("refuses a whole 402 when one option asks more, even if another conforms", () => {
    const error = refusal(() =>
      checkPaymentRequired(body(exact(), subscription({ amount: "9000001" })), listing, "forecast"),
    );
    expect(error.details).toMatchObject({ field: "price" });
  });

  it("refuses another payTo, in any option", () => {
    expect(
      refusal(() => checkPaymentRequired(body(exact({ payTo: OTHER })), listing, "t")).details,
    ).toMatchObject({
      field: "payTo",
      listed: PAY_TO,
      asked: OTHER,
    });
    expect(
      refusal(() => checkPaymentRequired(body(exact(), subscription({ payTo: OTHER })), listing, "t"))
        .details,
    ).toMatchObject({ field: "payTo" });
  });

  it("refuses another network or token when nothing is left on the listed ones, and drops extra ways to pay", () => {
    expect(
      refusal(() => checkPaymentRequired(body(exact({ network: "eip155:8453" })), listing, "t")).details,
    ).toMatchObject({ field: "network", listed: NETWORK, asked: "eip155:8453" });
    expect(
      refusal(() => checkPaymentRequired(body(exact({ token: OTHER })), listing, "t")).details,
    ).toMatchObject({
      field: "token",
      listed: TOKEN,
      asked: OTHER,
    });
    const mixed = checkPaymentRequired(
      body(exact({ network: "eip155:8453" }), exact({ token: OTHER }), exact()),
      listing,
      "t",
    );
    expect(mixed.accepts).toEqual([body(exact()).accepts[0]]);
  });

  it("refuses plan terms worse than listed: another plan, interval, allowance, overage price or manager", () => {
    const cases: [Record<string, unknown>, Record<string, unknown>, string][] = [
      [{}, { planId: "4" }, "plan"],
      [{}, { interval: 86_400 }, "plan"],
      [{}, { overage: { unitPrice: "1000", includedUnits: 10 } }, "plan"],
      [{}, { overage: { unitPrice: "5000", includedUnits: 1000 } }, "price"],
      [{}, { manager: OTHER }, "plan"],
    ];
    for (const [option, terms, field] of cases) {
      const error = refusal(() => checkPaymentRequired(body(subscription(option, terms)), listing, "t"));
      expect(error.details?.field, JSON.stringify(terms)).toBe(field);
    }
  });

  it("refuses a scheme that was not listed", () => {
    const oneTimeOnly = listingOf(
      { seller: { payTo: PAY_TO }, network: NETWORK, token: TOKEN },
      [{ type: "one-time", amount: "10000" }],
      "manifest",
    );
    expect(refusal(() => checkPaymentRequired(body(subscription()), oneTimeOnly, "t")).details).toMatchObject(
      {
        field: "plan",
        listed: "no plan",
      },
    );
    const planOnly = listingOf(
      { seller: { payTo: PAY_TO }, network: NETWORK, token: TOKEN },
      listing.pricing.filter((p) => p.type !== "one-time"),
      "manifest",
    );
    expect(refusal(() => checkPaymentRequired(body(exact()), planOnly, "t")).details).toMatchObject({
      field: "scheme",
    });
  });
});

describe("checkX402PaymentRequired", () => {
  const x402 = (...accepts: Record<string, unknown>[]) =>
    ({
      x402Version: 2,
      resource: { url: "http://127.0.0.1/x" },
      accepts: accepts.map((a) => ({
        scheme: "exact",
        network: NETWORK,
        amount: "10000",
        asset: TOKEN,
        payTo: PAY_TO,
        maxTimeoutSeconds: 60,
        ...a,
      })),
    }) as unknown as X402PaymentRequired;

  it("keeps conforming exact options and refuses price, payTo, network and token mismatches", () => {
    expect(checkX402PaymentRequired(x402({}), listing, "t").accepts).toHaveLength(1);
    expect(
      refusal(() => checkX402PaymentRequired(x402({ amount: "20000" }), listing, "t")).details?.field,
    ).toBe("price");
    expect(refusal(() => checkX402PaymentRequired(x402({ payTo: OTHER }), listing, "t")).details?.field).toBe(
      "payTo",
    );
    expect(
      refusal(() => checkX402PaymentRequired(x402({ network: "eip155:8453" }), listing, "t")).details?.field,
    ).toBe("network");
    expect(refusal(() => checkX402PaymentRequired(x402({ asset: OTHER }), listing, "t")).details?.field).toBe(
      "token",
    );
  });
});

describe("checkPinnedPayee", () => {
  it("pins an origin's first payee and refuses another one later", async () => {
    const pins = createPayeePins();
    expect(await checkPinnedPayee([PAY_TO], pins, "http://a", "t")).toBe(PAY_TO);
    expect(await checkPinnedPayee([PAY_TO.toUpperCase().replace("0X", "0x")], pins, "http://a", "t")).toBe(
      PAY_TO,
    );
    const error = await checkPinnedPayee([OTHER], pins, "http://a", "t").catch((e: unknown) => e);
    expect(isTollgateError(error, "OfferMismatch")).toBe(true);
    expect((error as TollgateError).details).toMatchObject({ field: "payTo", listed: PAY_TO, asked: OTHER });
    // Another origin is another seller.
    expect(await checkPinnedPayee([OTHER], pins, "http://b", "t")).toBe(OTHER);
  });

  it.each(["pglite", ...(process.env.DATABASE_URL === undefined ? [] : ["postgres"])])(
    "keeps pins in the agent's store (%s): a second process of the agent is held to the first payee",
    async (kind) => {
      const store = await createTestStore(
        kind === "postgres" ? { databaseUrl: process.env.DATABASE_URL } : {},
      );
      try {
        const first = createStoredPayeePins({ store, agent: "pinned" });
        const second = createStoredPayeePins({ store, agent: "pinned" });
        // Two processes race for the first pin: one wins, and both answer it.
        const [a, b] = await Promise.all([first.pin("http://a", PAY_TO), second.pin("http://a", OTHER)]);
        expect(a).toBe(b);
        const restarted = createStoredPayeePins({ store, agent: "pinned" });
        expect(await restarted.pin("http://a", a === PAY_TO ? OTHER : PAY_TO)).toBe(a);
        const refused = await checkPinnedPayee(
          [a === PAY_TO ? OTHER : PAY_TO],
          restarted,
          "http://a",
          "t",
        ).catch((e: unknown) => e);
        expect(isTollgateError(refused, "OfferMismatch")).toBe(true);
        // Pins are per agent.
        expect(await createStoredPayeePins({ store, agent: "other" }).pin("http://a", OTHER)).toBe(OTHER);
      } finally {
        await store.close();
      }
    },
  );
});

describe("checkPaymentRequired, for any 402 a seller may send", () => {
  it("passes only options that pay the listed payee, on the listed network and token, at no more than listed", () => {
    const addresses = [PAY_TO, OTHER, TOKEN] as const;
    const option = fc.oneof(
      fc.record({
        kind: fc.constant("exact" as const),
        amount: fc.oneof(fc.bigInt({ min: 1n, max: 10_000n }), fc.bigInt({ min: 10_001n, max: 100_000n })),
        payTo: fc.constantFrom(...addresses),
        token: fc.constantFrom(...addresses),
        network: fc.constantFrom(NETWORK, "eip155:8453"),
      }),
      fc.record({
        kind: fc.constant("subscription" as const),
        amount: fc.bigInt({ min: 1n, max: 20_000_000n }),
        payTo: fc.constantFrom(...addresses),
        token: fc.constantFrom(...addresses),
        network: fc.constantFrom(NETWORK, "eip155:8453"),
        planId: fc.constantFrom("3", "4"),
        interval: fc.constantFrom(2_592_000, 86_400),
        includedUnits: fc.constantFrom(10, 1000, 5000),
        unitPrice: fc.bigInt({ min: 0n, max: 5000n }),
      }),
    );
    let passed = 0;
    fc.assert(
      fc.property(fc.array(option, { minLength: 1, maxLength: 5 }), (options) => {
        const paymentRequired = body(
          ...options.map((o) =>
            o.kind === "exact"
              ? exact({ amount: o.amount.toString(), payTo: o.payTo, token: o.token, network: o.network })
              : subscription(
                  { amount: o.amount.toString(), payTo: o.payTo, token: o.token, network: o.network },
                  {
                    planId: o.planId,
                    interval: o.interval,
                    overage: { unitPrice: o.unitPrice.toString(), includedUnits: o.includedUnits },
                  },
                ),
          ),
        );
        let kept: PaymentRequired;
        try {
          kept = checkPaymentRequired(paymentRequired, listing, "t");
        } catch (error) {
          expect(isTollgateError(error, "OfferMismatch")).toBe(true);
          return;
        }
        passed++;
        expect(kept.accepts.length).toBeGreaterThan(0);
        for (const o of kept.accepts) {
          expect([o.payTo, o.token, o.network]).toEqual([PAY_TO, TOKEN, NETWORK]);
          if (o.scheme === "exact") expect(BigInt(o.amount)).toBeLessThanOrEqual(10_000n);
          else {
            expect(o.tollgate?.planId).toBe("3");
            expect(BigInt(o.amount)).toBeLessThanOrEqual(9_000_000n);
            expect(o.tollgate?.interval).toBe(2_592_000);
            expect(o.tollgate?.overage?.includedUnits ?? 0).toBeGreaterThanOrEqual(1000);
            expect(BigInt(o.tollgate?.overage?.unitPrice ?? "0")).toBeLessThanOrEqual(1000n);
          }
        }
      }),
      { numRuns: 500 },
    );
    // The property is not vacuous: some 402s were let through.
    expect(passed).toBeGreaterThan(0);
  });
});
