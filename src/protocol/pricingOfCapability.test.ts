import { describe, expect, it } from "vitest";
import { pricingOfCapability, pricingToWire } from "./pricing.ts";

const plan = {
  planId: "7",
  amount: 5_000_000n,
  interval: 2_592_000,
  includedUnits: 0,
  overageUnitPrice: 0n,
  manager: "0x5FbDB2315678afecb367f032d93F642f64180aa3" as const,
};

describe("pricingOfCapability", () => {
  it("reads written prices in either form into the one pricing type", () => {
    expect(pricingOfCapability({ type: "one-time", price: "0.02" })).toEqual({
      type: "one-time",
      amount: 20_000n,
    });
    expect(pricingOfCapability({ type: "one-time", amount: "20000" })).toEqual({
      type: "one-time",
      amount: 20_000n,
    });
    expect(pricingOfCapability({ type: "channel", amount: 4_000 }, { channels: plan.manager })).toEqual({
      type: "channel",
      amount: 4_000n,
      contract: plan.manager,
    });
  });

  it("completes a subscription with its created plan, metered when it includes units and prices overage", () => {
    const entry = {
      type: "subscription" as const,
      plan: { price: "5", interval: 2_592_000, includedUnits: 0, overageUnitPrice: "0" },
    };
    expect(pricingOfCapability(entry)).toBeUndefined();
    expect(pricingToWire(pricingOfCapability(entry, { plan })!)).toEqual({
      type: "subscription",
      planId: "7",
      amount: "5000000",
      interval: 2_592_000,
      includedUnits: 0,
      overageUnitPrice: "0",
      manager: plan.manager,
    });
    const metered = pricingOfCapability(entry, {
      plan: { ...plan, includedUnits: 100, overageUnitPrice: 10n },
    });
    expect(metered).toMatchObject({
      type: "metered",
      unitsPerCall: 1,
      includedUnits: 100n,
      overageUnitPrice: 10n,
    });
  });
});
