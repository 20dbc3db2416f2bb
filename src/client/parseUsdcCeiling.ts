import { parseUnitsExact, USDC_DECIMALS } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";

/**
 * The most a payer will pay for one request, in the token's smallest unit. A `bigint` is taken as
 * smallest units (`500_000n` = 0.50 USDC); a string is always USDC text (`"0.50"`, and `"20000"` is
 * 20 000 USDC), converted exactly. Throws `InvalidAmount` for anything else (floats, negatives, more
 * than 6 decimals). The market's `maxPrice` query reads bare digits as smallest units instead
 * (`parseAtomicOrUsdcCeiling`).
 *
 * @example
 * parseUsdcCeiling("0.25") // 250000n
 */
export function parseUsdcCeiling(value: bigint | string, decimals: number = USDC_DECIMALS): bigint {
  if (typeof value === "bigint") {
    if (value < 0n) throw new TollgateError("InvalidAmount", "a price ceiling cannot be negative");
    return value;
  }
  if (typeof value === "string") return parseUnitsExact(value, decimals);
  throw new TollgateError(
    "InvalidAmount",
    'a price ceiling is a bigint of smallest units or USDC text like "0.50"',
    {
      details: { type: typeof value },
    },
  );
}
