/**
 * Amounts a payer's caller writes by hand: `maxOverage`, `approval`, an overage cap. The specification
 * writes `subscribe({ planId, maxOverage: 2 })` with the number in USDC, so three forms are read:
 *
 * - `bigint`: smallest units, as everywhere in code (`2_000_000n` = 2 USDC);
 * - decimal text: token units (`"2.50"`), converted exactly;
 * - `number`: token units (`2` = 2 USDC, `0.05` = 5 hundredths), converted exactly from the decimal
 *   the number stands for (its shortest round-trip text, which is what was written for any literal of
 *   up to 15 significant digits).
 *
 * Invariant: nothing is ever rounded. A number with more decimals than the token has (`0.1 + 0.2`,
 * `1e-7`), more significant digits than a double keeps exactly (16+), NaN, ±Infinity or a negative
 * value is refused with `InvalidAmount` instead of being read as a nearby amount.
 */
import { parseUnitsExact, USDC_DECIMALS } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";

/** A hand-written token amount: bigint smallest units, or token units as text or a number. */
export type TokenAmountInput = bigint | string | number;

/** A double keeps any decimal of up to 15 significant digits exactly (IEEE 754 binary64, DBL_DIG). */
const EXACT_SIGNIFICANT_DIGITS = 15;

/**
 * The smallest-unit value of a hand-written token amount. Throws `InvalidAmount` (with `details.what`
 * naming the option) for anything that is not exactly an amount of the token.
 *
 * @example
 * parseTokenAmount(2, "maxOverage")       // 2000000n
 * parseTokenAmount("2.50", "maxOverage")  // 2500000n
 * parseTokenAmount(7n, "maxOverage")      // 7n (smallest units)
 */
export function parseTokenAmount(
  value: TokenAmountInput,
  what: string,
  decimals: number = USDC_DECIMALS,
): bigint {
  const refuse = (reason: string, details: Record<string, unknown> = {}): never => {
    throw new TollgateError("InvalidAmount", `${what}: ${reason}`, { details: { what, ...details } });
  };
  if (typeof value === "bigint") {
    if (value < 0n) return refuse("cannot be negative", { value: value.toString() });
    return value;
  }
  if (typeof value === "string") {
    try {
      return parseUnitsExact(value, decimals);
    } catch (cause) {
      throw new TollgateError(
        "InvalidAmount",
        `${what}: ${cause instanceof Error ? cause.message : "invalid amount"} (token text like "2.50")`,
        { details: { what, text: value.slice(0, 100), decimals }, cause },
      );
    }
  }
  if (typeof value === "number") return numberToUnits(value, decimals, refuse);
  return refuse('is a number or text of token units (2 or "2.50") or a bigint of smallest units', {
    type: value === null ? "null" : typeof value,
  });
}

function numberToUnits(
  value: number,
  decimals: number,
  refuse: (reason: string, details?: Record<string, unknown>) => never,
): bigint {
  if (!Number.isFinite(value)) return refuse("must be a finite number", { value: String(value) });
  if (value < 0) return refuse("cannot be negative", { value });
  // Shortest round-trip text: `0.05` → "0.05", `0.1 + 0.2` → "0.30000000000000004", `1e-7` → "1e-7".
  const text = String(value);
  if (/e/i.test(text)) {
    return value < 1
      ? refuse(`has more than ${decimals} decimals`, { value: text, decimals })
      : refuse("is too large to be exact as a number: pass text or a bigint", { value: text });
  }
  const fraction = text.split(".")[1] ?? "";
  if (fraction.length > decimals) {
    return refuse(`has more than ${decimals} decimals`, { value: text, decimals });
  }
  const significant = text.replace(".", "").replace(/^0+/, "").length;
  if (significant > EXACT_SIGNIFICANT_DIGITS) {
    return refuse(
      `has more significant digits than a number keeps exactly (${EXACT_SIGNIFICANT_DIGITS}): pass text or a bigint`,
      { value: text },
    );
  }
  return parseUnitsExact(text, decimals);
}
