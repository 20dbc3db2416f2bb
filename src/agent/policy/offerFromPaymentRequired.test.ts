import { describe, expect, it } from "vitest";
import { type PaymentRequired, PaymentRequiredSchema } from "../../protocol/paymentRequired.ts";
import { decide } from "./decide.ts";
import { offerFromPaymentRequired } from "./offerFromPaymentRequired.ts";

const PAY_TO = "0x2222222222222222222222222222222222222222";
const OTHER = "0x3333333333333333333333333333333333333333";
const TOKEN = "0x4444444444444444444444444444444444444444";
const MANAGER = "0x5555555555555555555555555555555555555555";
const MEMO = `eyJ0IjoxfQ.${"A".repeat(43)}`;

function exact(overrides: Record<string, unknown> = {}) {
  return {
    scheme: "exact",
    network: "eip155:31337",
    token: TOKEN,
    amount: "10000",
    payTo: PAY_TO,
    memo: MEMO,
    tollgate: { planId: "3", subscriptionScheme: true, facilitator: "http://127.0.0.1:4020" },
    ...overrides,
  };
}

function subscription(overrides: Record<string, unknown> = {}) {
  return {
    scheme: "subscription",
    network: "eip155:31337",
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
    },
    ...overrides,
  };
}

function body(...accepts: Record<string, unknown>[]): PaymentRequired {
  return PaymentRequiredSchema.parse({ version: "1", error: "PaymentRequired", message: "pay", accepts });
}

describe("offerFromPaymentRequired", () => {
  it("reads the one-time price and the plan terms of a 402", () => {
    const paymentRequired = body(exact(), subscription());
    const result = offerFromPaymentRequired(paymentRequired);
    expect(result?.offer).toEqual({
      provider: PAY_TO,
      oneTime: { amount: 10_000n },
      subscription: {
        planId: "3",
        amount: 9_000_000n,
        interval: 2_592_000,
        includedUnits: 1000,
        overageUnitPrice: 1000n,
      },
    });
    expect(result?.oneTimeOption).toBe(paymentRequired.accepts[0]);
    expect(result?.subscriptionOption).toBe(paymentRequired.accepts[1]);
    // The offer is what decide() takes.
    expect(decide({ offer: result!.offer, forecast: { calls: 2000, horizonSeconds: 2_592_000 } }).mode).toBe(
      "subscribe",
    );
  });

  it("keeps to the requested network", () => {
    const paymentRequired = body(exact({ network: "eip155:8453", amount: "20000" }), exact(), subscription());
    expect(offerFromPaymentRequired(paymentRequired, { network: "eip155:31337" })?.offer.oneTime).toEqual({
      amount: 10_000n,
    });
    expect(offerFromPaymentRequired(paymentRequired, { network: "eip155:8453" })?.offer).toEqual({
      provider: PAY_TO,
      oneTime: { amount: 20_000n },
    });
    expect(offerFromPaymentRequired(paymentRequired, { network: "eip155:84532" })).toBeUndefined();
  });

  it("drops a one-time option that pays someone other than the plan's provider", () => {
    const result = offerFromPaymentRequired(body(exact({ payTo: OTHER }), subscription()));
    expect(result?.offer.oneTime).toBeUndefined();
    expect(result?.oneTimeOption).toBeUndefined();
    expect(result?.offer.provider).toBe(PAY_TO);
  });

  it("reads a plan without metering as no included units and no overage price", () => {
    const plain = subscription();
    const { overage: _, ...tollgate } = plain.tollgate as Record<string, unknown>;
    const result = offerFromPaymentRequired(body({ ...plain, tollgate }));
    expect(result?.offer.subscription).toMatchObject({ includedUnits: 0, overageUnitPrice: 0n });
    expect(result?.offer.oneTime).toBeUndefined();
  });

  it("has nothing to offer for zero prices", () => {
    expect(offerFromPaymentRequired(body(exact({ amount: "0" })))).toBeUndefined();
    const result = offerFromPaymentRequired(body(exact({ amount: "0" }), subscription()));
    expect(result?.offer.oneTime).toBeUndefined();
    expect(result?.oneTimeOption).toBeUndefined();
  });
});
