import { describe, expect, it } from "vitest";
import { parseAtomicOrUsdcCeiling } from "./parseAtomicOrUsdcCeiling.ts";

describe("parseAtomicOrUsdcCeiling", () => {
  it.each([
    ["20000", 20_000n],
    ["0", 0n],
    ["0.02", 20_000n],
    ["1usdc", 1_000_000n],
    ["1.5 USDC", 1_500_000n],
    ["0.000001", 1n],
    [" 7 ", 7n],
    ["115792089237316195423570985008687907853269984665640564039457584007913129639935", 2n ** 256n - 1n],
  ])("reads %j as %s", (text, expected) => {
    expect(parseAtomicOrUsdcCeiling(text)).toBe(expected);
  });

  it.each([
    ["", "empty"],
    ["-1", "negative"],
    ["1e6", "exponent"],
    ["0.0000001", "more than 6 decimals"],
    [".5", "no whole digits"],
    ["5.", "no fraction digits"],
    ["0x10", "hex"],
    ["1 eth", "another unit"],
    ["0500", "leading zero in atomic units"],
    ["115792089237316195423570985008687907853269984665640564039457584007913129639936", "above uint256"],
  ])("refuses %j (%s) with InvalidRequest", (text) => {
    expect(() => parseAtomicOrUsdcCeiling(text)).toThrow(expect.objectContaining({ code: "InvalidRequest" }));
  });
});
