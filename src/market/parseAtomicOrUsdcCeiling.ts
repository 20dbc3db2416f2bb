import { fromAtomic, parseUnitsExact, USDC_DECIMALS } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";

const ATOMIC = /^[0-9]+$/;
const DECIMAL = /^[0-9]+\.[0-9]+$/;
const WITH_UNIT = /^([0-9]+(?:\.[0-9]+)?)\s*usdc$/i;

/**
 * A catalog's `maxPrice` as an exact amount in the token's smallest unit. Two spellings, told apart
 * without guessing:
 * - digits only are atomic units, as every amount on Tollgate's wire (`"20000"` = 0.02 USDC);
 * - a decimal point or a `usdc` suffix makes it USDC text (`"0.02"`, `"1usdc"`, `"1.5 USDC"`),
 *   converted with 6 decimals and refused when it has more.
 * Throws `InvalidRequest` (with the parse error as `cause`) for anything else. A payer's ceiling reads
 * every string as USDC text instead (`parseUsdcCeiling` in the client).
 *
 * @example
 * parseAtomicOrUsdcCeiling("0.02") === parseAtomicOrUsdcCeiling("20000") // both 20000n
 */
export function parseAtomicOrUsdcCeiling(text: string, decimals: number = USDC_DECIMALS): bigint {
  const trimmed = typeof text === "string" ? text.trim() : "";
  try {
    if (ATOMIC.test(trimmed)) return fromAtomic(trimmed);
    if (DECIMAL.test(trimmed)) return parseUnitsExact(trimmed, decimals);
    const withUnit = WITH_UNIT.exec(trimmed);
    if (withUnit !== null) return parseUnitsExact(withUnit[1]!, decimals);
  } catch (cause) {
    throw refuse(text, cause);
  }
  throw refuse(text);
}

function refuse(text: unknown, cause?: unknown): TollgateError {
  return new TollgateError(
    "InvalidRequest",
    'maxPrice must be atomic units ("20000") or USDC text ("0.02", "1usdc") with at most 6 decimals',
    { details: { maxPrice: String(text).slice(0, 100) }, cause },
  );
}
