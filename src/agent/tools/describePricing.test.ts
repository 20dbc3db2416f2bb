import { describe, expect, it } from "vitest";
import { describePricing, maxCallPrice, minCallPrice, withPricing } from "./describePricing.ts";

const plan = { planId: "7", interval: 2_592_000, overageUnitPrice: "0" };

describe("describePricing", () => {
  it("states each way to pay in words, amounts exact", () => {
    expect(describePricing([{ type: "one-time", amount: "20000" }])).toBe(
      "Price: 0.02 USDC per call, paid once per call.",
    );
    expect(
      describePricing([
        { type: "one-time", amount: "5000" },
        { type: "subscription", amount: "100000", includedUnits: 0, ...plan },
      ]),
    ).toBe(
      "Price: 0.005 USDC per call, paid once per call; or subscription 0.1 USDC every 30 days, calls included.",
    );
    expect(
      describePricing([
        {
          type: "metered",
          amount: "1000000",
          includedUnits: 100,
          unitsPerCall: 2,
          ...plan,
          interval: 3_600,
          overageUnitPrice: "1000",
        },
      ]),
    ).toBe(
      "Price: metered subscription 1 USDC every 1 hour with 100 units included, then 0.001 USDC per unit; a call uses 2 units.",
    );
    expect(
      describePricing([{ type: "subscription", amount: "1", includedUnits: 10, ...plan, interval: 90 }]),
    ).toBe("Price: subscription 0.000001 USDC every 90 seconds with 10 calls included.");
  });

  it("appends the price to the seller's description, which stays first and whole", () => {
    const pricing = [{ type: "one-time" as const, amount: "20000" }];
    expect(withPricing("Summarizes a text.", pricing)).toBe(
      "Summarizes a text. Price: 0.02 USDC per call, paid once per call.",
    );
    expect(withPricing("Summarizes a text", pricing)).toBe(
      "Summarizes a text. Price: 0.02 USDC per call, paid once per call.",
    );
    expect(withPricing("Summarizes a text.", undefined)).toBe("Summarizes a text.");
  });

  it("bounds what one call may reserve, and the cheapest way to pay", () => {
    const pricing = [
      { type: "one-time" as const, amount: "5000" },
      { type: "subscription" as const, amount: "100000", includedUnits: 0, ...plan },
    ];
    expect(maxCallPrice(pricing)).toBe(100_000n);
    expect(minCallPrice(pricing)).toBe(5_000n);
    expect(minCallPrice([])).toBeUndefined();
  });
});
