import { describe, expect, it } from "vitest";
import { TollgateError } from "../protocol/errors.ts";
import { parseTokenAmount } from "./parseTokenAmount.ts";

function refusal(value: unknown, decimals?: number): TollgateError {
  try {
    parseTokenAmount(value as never, "maxOverage", decimals);
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error(`${String(value)} was accepted`);
}

describe("parseTokenAmount", () => {
  it("reads a number as token units, as the specification writes maxOverage", () => {
    expect(parseTokenAmount(2, "maxOverage")).toBe(2_000_000n);
    expect(parseTokenAmount(2.5, "maxOverage")).toBe(2_500_000n);
    expect(parseTokenAmount(0.05, "maxOverage")).toBe(50_000n);
    expect(parseTokenAmount(0.000001, "maxOverage")).toBe(1n);
    expect(parseTokenAmount(0, "maxOverage")).toBe(0n);
    expect(parseTokenAmount(123456789.123456, "maxOverage")).toBe(123_456_789_123_456n);
  });

  it("reads text as token units and a bigint as smallest units", () => {
    expect(parseTokenAmount("2.50", "maxOverage")).toBe(2_500_000n);
    expect(parseTokenAmount(2_000_000n, "maxOverage")).toBe(2_000_000n);
  });

  it("honours the token's decimals", () => {
    expect(parseTokenAmount(1.5, "approval", 18)).toBe(1_500_000_000_000_000_000n);
    expect(parseTokenAmount(3, "approval", 0)).toBe(3n);
    expect(refusal(0.5, 0).message).toMatch(/more than 0 decimals/);
  });

  it.each([
    ["a float with more decimals than the token", 0.1 + 0.2, /more than 6 decimals/],
    ["seven decimals", 0.0000001, /more than 6 decimals/],
    ["NaN", Number.NaN, /finite/],
    ["Infinity", Number.POSITIVE_INFINITY, /finite/],
    ["a negative number", -1, /negative/],
    ["a negative bigint", -1n, /negative/],
    // Written as a literal, this is what a caller gets: the double nearest is 12345678901.123455.
    ["more digits than a double keeps", Number("12345678901.123456"), /significant digits/],
    ["an unsafe integer", 2 ** 60, /significant digits|too large/],
    ["an exponent too large", 1e21, /too large/],
    ["negative text", "-1", /invalid amount/],
    ["text with seven decimals", "1.0000001", /more than 6 decimals/],
    ["null", null, /number or text/],
    ["an object", { amount: 2 }, /number or text/],
  ])("refuses %s with InvalidAmount naming the option", (_name, value, message) => {
    const error = refusal(value);
    expect(error.code).toBe("InvalidAmount");
    expect(error.message).toMatch(/^maxOverage: /);
    expect(error.message).toMatch(message);
    expect(error.details?.what).toBe("maxOverage");
  });
});
