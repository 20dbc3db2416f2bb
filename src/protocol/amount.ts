/**
 * Token amounts (docs/protocol.md): `bigint` in code, a decimal integer string of the token's smallest unit
 * on the wire (`"500000"` = 0.50 USDC), and exact decimal text for people (`"0.5"`). Never a float.
 */
import { z } from "zod";
import { TollgateError } from "./errors.ts";

/** USDC has 6 decimals. */
export const USDC_DECIMALS = 6;

/** The largest value a uint256 holds: the ceiling of every on-chain amount, id and timestamp. */
export const MAX_UINT256 = 2n ** 256n - 1n;

// 2^256 − 1 has 78 decimal digits; checking length first keeps BigInt() off megabyte-long strings.
const MAX_UINT256_DIGITS = 78;
const ATOMIC_PATTERN = /^(0|[1-9][0-9]*)$/;
/** Decimals accepted by the unit converters: enough for any ERC-20 (uint8 decimals), bounded for sanity. */
const MAX_DECIMALS = 77;
/** Longest human amount text considered at all: uint256 digits, a point, and up to 77 decimals. */
const MAX_UNITS_TEXT_LENGTH = MAX_UINT256_DIGITS + 1 + MAX_DECIMALS;

function isUint256Text(text: string): boolean {
  return text.length <= MAX_UINT256_DIGITS && ATOMIC_PATTERN.test(text) && BigInt(text) <= MAX_UINT256;
}

/**
 * A uint256 as a canonical decimal string: digits only, no sign, no leading zeros except `"0"`,
 * no exponent, at most 2^256 − 1. Canonical so that equal values have equal text (memo and
 * signature inputs compare text). Used for amounts, on-chain ids and EIP-3009 timestamps.
 */
export const UintStringSchema = z.string().refine(isUint256Text, {
  error: "expected a decimal uint256 string without sign, exponent or leading zeros",
});

/** An amount in the token's smallest unit, as it travels on the wire. Stays a string after parsing. */
export const AtomicAmountSchema = UintStringSchema;
export type AtomicAmount = z.infer<typeof AtomicAmountSchema>;

/** `AtomicAmountSchema` that yields the `bigint` value, for code that parses straight into money. */
export const AtomicBigIntSchema = AtomicAmountSchema.transform((text) => BigInt(text));

/** The wire text of an amount. Throws `InvalidAmount` for negatives and values above uint256. */
export function toAtomic(value: bigint): AtomicAmount {
  if (value < 0n || value > MAX_UINT256) {
    throw new TollgateError("InvalidAmount", "amount must be between 0 and 2^256 - 1", {
      details: { value: value.toString() },
    });
  }
  return value.toString();
}

/** The value of an amount's wire text. Throws `InvalidAmount` unless the text is canonical uint256. */
export function fromAtomic(text: string): bigint {
  if (typeof text !== "string" || !isUint256Text(text)) {
    throw new TollgateError("InvalidAmount", "amount must be a decimal uint256 string", {
      details: { text: preview(text) },
    });
  }
  return BigInt(text);
}

function checkDecimals(decimals: number): void {
  if (!Number.isInteger(decimals) || decimals < 0 || decimals > MAX_DECIMALS) {
    throw new TollgateError("InvalidAmount", `decimals must be an integer from 0 to ${MAX_DECIMALS}`, {
      details: { decimals },
    });
  }
}

const UNITS_PATTERN = /^([0-9]+)(?:\.([0-9]+))?$/;

/**
 * Exact conversion of human text to the smallest unit: `parseUnitsExact("2.5") === 2500000n`.
 *
 * Accepts digits with an optional point and at least one digit on each side of it. Refuses, with
 * `InvalidAmount`, anything else: signs, exponents (`"1e6"`), blanks and surrounding spaces, more
 * fractional digits than `decimals` (even zeros: the text claims a precision the token lacks),
 * and values above uint256. Leading zeros are harmless here (`"007"` is 7 units).
 */
export function parseUnitsExact(text: string, decimals: number = USDC_DECIMALS): bigint {
  checkDecimals(decimals);
  const refuse = (reason: string): never => {
    throw new TollgateError("InvalidAmount", `invalid amount: ${reason}`, {
      details: { text: preview(text), decimals },
    });
  };
  if (typeof text !== "string") return refuse("not text");
  if (text.length > MAX_UNITS_TEXT_LENGTH) return refuse("too long");
  const match = UNITS_PATTERN.exec(text);
  if (match === null) return refuse("expected digits with an optional decimal point");
  const whole = match[1] ?? "";
  const fraction = match[2] ?? "";
  if (fraction.length > decimals) return refuse(`more than ${decimals} decimals`);
  const value = BigInt(whole) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, "0") || "0");
  if (value > MAX_UINT256) return refuse("above 2^256 - 1");
  return value;
}

/**
 * Exact decimal text of an amount in the smallest unit: `formatUnitsExact(2500000n) === "2.5"`,
 * `1n` → `"0.000001"`, `10000000n` → `"10"`. No trailing zeros, no exponent; negatives get a `-`.
 * `parseUnitsExact(formatUnitsExact(v)) === v` for every non-negative uint256 `v`.
 */
export function formatUnitsExact(value: bigint, decimals: number = USDC_DECIMALS): string {
  checkDecimals(decimals);
  const sign = value < 0n ? "-" : "";
  const magnitude = value < 0n ? -value : value;
  const scale = 10n ** BigInt(decimals);
  const whole = (magnitude / scale).toString();
  const fraction = (magnitude % scale).toString().padStart(decimals, "0").replace(/0+$/, "");
  return fraction === "" ? `${sign}${whole}` : `${sign}${whole}.${fraction}`;
}

function preview(value: unknown): string {
  const text = typeof value === "string" ? value : String(typeof value);
  return text.length > 100 ? `${text.slice(0, 100)}…` : text;
}
