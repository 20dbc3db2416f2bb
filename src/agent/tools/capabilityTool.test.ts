import { describe, expect, it } from "vitest";
import { z } from "zod";
import { isTollgateError } from "../../protocol/errors.ts";
import { defineCapability, isCapability, pricingAmount } from "./capability.ts";
import { capabilityTool } from "./capabilityTool.ts";

const double = defineCapability({
  name: "double",
  description: "Double a number.",
  input: z.object({ value: z.int() }),
  output: z.object({ doubled: z.int() }),
  pricing: [{ type: "one-time", price: "0.01" }],
  handler: async ({ value }) => ({ doubled: value * 2 }),
});

describe("capabilityTool", () => {
  it("runs the handler on parsed input and returns the output's JSON text", async () => {
    expect(await capabilityTool(double).invoke({ value: 21 })).toBe('{"doubled":42}');
  });

  it("treats an output its schema rejects as an Internal fault", async () => {
    const broken = { ...double, handler: async () => ({ doubled: "many" }) } as unknown as typeof double;
    const failure = await capabilityTool(broken)
      .invoke({ value: 1 })
      .catch((error: unknown) => error);
    expect(isTollgateError(failure, "Internal")).toBe(true);
  });

  it("passes the caller's abort signal to the handler", async () => {
    let seen: AbortSignal | undefined;
    const watcher = defineCapability({
      ...double,
      handler: async ({ value }, { signal }) => {
        seen = signal;
        return { doubled: value * 2 };
      },
    });
    const controller = new AbortController();
    await capabilityTool(watcher).invoke({ value: 1 }, { signal: controller.signal });
    expect(seen).toBeInstanceOf(AbortSignal);
  });
});

describe("defineCapability", () => {
  it("refuses a name that is not a tool name, and pricing that is not exact USDC text", () => {
    expect(() => defineCapability({ ...double, name: "two words" })).toThrow();
    expect(() =>
      defineCapability({ ...double, pricing: [{ type: "one-time", price: "0.0000001" }] }),
    ).toThrow();
    expect(() => defineCapability({ ...double, pricing: [] })).toThrow();
  });

  it("reads amount as smallest units and price as USDC text, refusing decimal text under amount", () => {
    for (const entry of [{ amount: 20000 }, { amount: 20_000n }, { amount: "20000" }, { price: "0.02" }]) {
      const capability = defineCapability({ ...double, pricing: [{ type: "one-time", ...entry }] });
      expect(pricingAmount(capability.pricing[0] as { amount?: number; price?: string })).toBe(20_000n);
    }
    expect(() => defineCapability({ ...double, pricing: [{ type: "one-time", amount: "0.02" }] })).toThrow(
      /amount .*0\.02.* is not an integer number of smallest units; for 0\.02 USDC write price/,
    );
    expect(() =>
      defineCapability({ ...double, pricing: [{ type: "one-time", amount: 20000, price: "0.02" }] }),
    ).toThrow(/exactly one of `amount`/);
  });

  it("recognizes the capability shape", () => {
    expect(isCapability(double)).toBe(true);
    expect(isCapability({ ...double, handler: undefined })).toBe(false);
    expect(isCapability({ ...double, input: {} })).toBe(false);
  });
});
