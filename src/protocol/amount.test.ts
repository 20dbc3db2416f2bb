import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AtomicAmountSchema,
  AtomicBigIntSchema,
  formatUnitsExact,
  fromAtomic,
  MAX_UINT256,
  parseUnitsExact,
  toAtomic,
  USDC_DECIMALS,
} from "./amount.ts";
import { TollgateError } from "./errors.ts";

const uint256 = fc.bigInt({ min: 0n, max: MAX_UINT256 });

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (error instanceof TollgateError) return error.code;
    throw error;
  }
}

describe("atomic amounts", () => {
  it("round-trips every uint256 through its wire text", () => {
    fc.assert(
      fc.property(uint256, (value) => {
        const text = toAtomic(value);
        expect(AtomicAmountSchema.parse(text)).toBe(text);
        expect(fromAtomic(text)).toBe(value);
        expect(AtomicBigIntSchema.parse(text)).toBe(value);
      }),
      { numRuns: 1000 },
    );
  });

  it("accepts the bounds 0 and 2^256 - 1", () => {
    expect(fromAtomic("0")).toBe(0n);
    expect(fromAtomic(MAX_UINT256.toString())).toBe(MAX_UINT256);
  });

  it.each([
    ["-1", "negative"],
    ["+1", "signed"],
    ["01", "leading zero"],
    ["1e6", "exponent"],
    ["1.0", "decimal point"],
    ["", "blank"],
    [" 1", "space"],
    ["0x10", "hex"],
    ["abc", "not a number"],
    [(MAX_UINT256 + 1n).toString(), "above uint256"],
    ["9".repeat(10_000), "huge"],
  ])("refuses %j (%s) with InvalidAmount", (text) => {
    expect(AtomicAmountSchema.safeParse(text).success).toBe(false);
    expect(codeOf(() => fromAtomic(text))).toBe("InvalidAmount");
  });

  it("refuses to write negatives or values above uint256", () => {
    expect(codeOf(() => toAtomic(-1n))).toBe("InvalidAmount");
    expect(codeOf(() => toAtomic(MAX_UINT256 + 1n))).toBe("InvalidAmount");
  });

  it("refuses any string that is not canonical decimal, never throwing anything else", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 100 }), (text) => {
        const canonical = /^(0|[1-9][0-9]*)$/.test(text) && BigInt(text) <= MAX_UINT256;
        expect(AtomicAmountSchema.safeParse(text).success).toBe(canonical);
        expect(codeOf(() => fromAtomic(text))).toBe(canonical ? undefined : "InvalidAmount");
      }),
      { numRuns: 2000 },
    );
  });
});

describe("parseUnitsExact / formatUnitsExact", () => {
  it("converts the examples exactly", () => {
    expect(USDC_DECIMALS).toBe(6);
    expect(parseUnitsExact("2.5")).toBe(2_500_000n);
    expect(parseUnitsExact("0.000001")).toBe(1n);
    expect(parseUnitsExact("10")).toBe(10_000_000n);
    expect(parseUnitsExact("0")).toBe(0n);
    expect(parseUnitsExact("007.50")).toBe(7_500_000n);
    expect(parseUnitsExact("1.5", 18)).toBe(1_500_000_000_000_000_000n);
    expect(parseUnitsExact("42", 0)).toBe(42n);
    expect(formatUnitsExact(2_500_000n)).toBe("2.5");
    expect(formatUnitsExact(1n)).toBe("0.000001");
    expect(formatUnitsExact(10_000_000n)).toBe("10");
    expect(formatUnitsExact(0n)).toBe("0");
    expect(formatUnitsExact(-1_500_000n)).toBe("-1.5");
    expect(formatUnitsExact(42n, 0)).toBe("42");
  });

  it("round-trips every uint256 at any decimals", () => {
    fc.assert(
      fc.property(uint256, fc.integer({ min: 0, max: 30 }), (value, decimals) => {
        expect(parseUnitsExact(formatUnitsExact(value, decimals), decimals)).toBe(value);
      }),
      { numRuns: 1000 },
    );
  });

  it("reads text that has no more decimals than allowed back to the same text", () => {
    const text = fc
      .tuple(fc.bigInt({ min: 0n, max: 10n ** 30n }), fc.stringMatching(/^[0-9]{0,6}$/))
      .map(([whole, fraction]) => (fraction === "" ? whole.toString() : `${whole}.${fraction}`));
    fc.assert(
      fc.property(text, (t) => {
        const normalized = t.includes(".") ? t.replace(/\.?0+$/, "") : t;
        expect(formatUnitsExact(parseUnitsExact(t))).toBe(normalized === "" ? "0" : normalized);
      }),
      { numRuns: 1000 },
    );
  });

  it.each([
    ["-1", "negative"],
    ["-0.5", "negative fraction"],
    ["+1", "plus sign"],
    ["1.0000001", "more than 6 decimals"],
    ["1.0000000", "more than 6 decimals, even zeros"],
    ["1e6", "exponent"],
    ["1E-6", "exponent"],
    ["", "blank"],
    ["   ", "blank"],
    [" 1", "leading space"],
    ["1 ", "trailing space"],
    [".5", "no whole part"],
    ["5.", "no fraction digits"],
    ["1,5", "comma"],
    ["1_000", "separator"],
    ["0x10", "hex"],
    ["NaN", "not a number"],
    ["Infinity", "not a number"],
    ["abc", "not a number"],
    ["١", "non-ASCII digit"],
    [(MAX_UINT256 / 10n ** 6n + 1n).toString(), "above uint256 once scaled"],
    ["9".repeat(10_000), "huge"],
  ])("refuses %j (%s) with InvalidAmount", (text) => {
    expect(codeOf(() => parseUnitsExact(text))).toBe("InvalidAmount");
  });

  it("refuses a decimals argument that is not a small non-negative integer", () => {
    expect(codeOf(() => parseUnitsExact("1", -1))).toBe("InvalidAmount");
    expect(codeOf(() => parseUnitsExact("1", 1.5))).toBe("InvalidAmount");
    expect(codeOf(() => formatUnitsExact(1n, 78))).toBe("InvalidAmount");
  });

  it("answers arbitrary text with a value or InvalidAmount, nothing else", () => {
    const alphabet = fc.constantFrom(..."0123456789.-+eE x_,");
    const garbage = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: alphabet, maxLength: 40 }));
    fc.assert(
      fc.property(garbage, (text) => {
        const code = codeOf(() => parseUnitsExact(text));
        const valid = /^[0-9]+(\.[0-9]{1,6})?$/.test(text);
        expect(code).toBe(valid ? undefined : "InvalidAmount");
      }),
      { numRuns: 3000 },
    );
  });
});
