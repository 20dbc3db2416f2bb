import { describe, expect, it } from "vitest";
import {
  optionTermsOf,
  type Pricing,
  perCallPrice,
  pricingFromWire,
  pricingOfOption,
  pricingToWire,
  WirePricingSchema,
} from "./pricing.ts";

const MANAGER = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as const;
const plan = {
  planId: "3",
  amount: 9_000_000n,
  interval: 2_592_000,
  includedUnits: 1_000n,
  overageUnitPrice: 1_000n,
  manager: MANAGER,
} as const;
const every: Pricing[] = [
  { type: "one-time", amount: 500_000n },
  { type: "subscription", ...plan },
  { type: "metered", ...plan, unitsPerCall: 5 },
];

describe("the one pricing type", () => {
  it("round-trips every variant through its wire form", () => {
    for (const pricing of every) {
      const wire = WirePricingSchema.parse(JSON.parse(JSON.stringify(pricingToWire(pricing))));
      expect(pricingFromWire(wire)).toEqual(pricing);
    }
  });

  it("reads back from a 402 option what the gate wrote into it", () => {
    const oneTime = optionTermsOf({ type: "one-time", amount: 500_000n });
    expect(pricingOfOption({ scheme: "exact", amount: oneTime.amount.toString() })).toEqual(every[0]);
    const terms = optionTermsOf({ type: "subscription", ...plan });
    expect(terms.tollgate).toEqual({
      planId: "3",
      interval: 2_592_000,
      manager: MANAGER,
      overage: { unitPrice: "1000", includedUnits: 1000 },
    });
    const option = { scheme: "subscription", amount: terms.amount.toString(), tollgate: terms.tollgate };
    expect(pricingOfOption(option)).toEqual({ type: "subscription", ...plan });
  });

  it("gives a flat plan no overage terms, and knows nothing of other schemes or plans without terms", () => {
    const flat = optionTermsOf({ type: "subscription", ...plan, includedUnits: 0n, overageUnitPrice: 0n });
    expect(flat.tollgate?.overage).toBeUndefined();
    expect(pricingOfOption({ scheme: "upto", amount: "10" })).toBeUndefined();
    expect(pricingOfOption({ scheme: "channel", amount: "10" })).toEqual({ type: "channel", amount: 10n });
    expect(pricingOfOption({ scheme: "subscription", amount: "10", tollgate: {} })).toBeUndefined();
  });

  it("prices one call: one-time as is, a plan per period, a metered plan over its included calls, rounded up", () => {
    expect(perCallPrice(every[0] as Pricing)).toBe(500_000n);
    expect(perCallPrice(every[1] as Pricing)).toBe(9_000_000n);
    // 1000 included units / 5 per call = 200 calls: ⌈9 000 000 / 200⌉.
    expect(perCallPrice(every[2] as Pricing)).toBe(45_000n);
    // 7 units a call with 3 included: no whole call included, so one call's price.
    expect(perCallPrice({ type: "metered", ...plan, includedUnits: 3n, unitsPerCall: 7 })).toBe(
      9_000_000n + 4n * 1_000n,
    );
    expect(perCallPrice({ type: "metered", ...plan, amount: 10n, includedUnits: 3n, unitsPerCall: 1 })).toBe(
      4n,
    );
  });
});
