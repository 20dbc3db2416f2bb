import { parseUnitsExact, USDC_DECIMALS } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";

/**
 * The most a payer will pay for one request, in the token's smallest unit. A `bigint` is taken as
 * smallest units (`500_000n` = 0.50 USDC); a string as USDC text (`"0.50"`), converted exactly.
 * Throws `InvalidAmount` for anything else (floats, negatives, more than 6 decimals).
 *
 * @example
 * parsePriceCeiling("0.25") // 250000n
 */
export function parsePriceCeiling(value: bigint | string, decimals: number = USDC_DECIMALS): bigint {
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
