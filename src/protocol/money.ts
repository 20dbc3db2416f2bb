/**
 * The one way money is written by a person: on the command line, in environment variables (the
 * facilitator's `TOLLGATE_MIN_AMOUNT` among them) and config keys. USDC text (`"0.50"`, `"5"`,
 * `"5 USDC"`, `"5usdc"`), or smallest units in one explicit form, `<digits>units` (`"500000units"` =
 * 0.50 USDC). Bare digits are always USDC, so no text reads as two different amounts: `"50000"` is
 * 50 000 USDC, and 0.05 USDC is `"0.05"` or `"50000units"`.
 * Every refusal is `InvalidRequest` naming where the text came from (`--total`, an env var, a key).
 */
import { formatUnitsExact, MAX_UINT256, USDC_DECIMALS } from "./amount.ts";
import { TollgateError } from "./errors.ts";

/** The notation in one line, for `--help` texts and error messages. */
export const MONEY_NOTATION =
  'amounts are USDC ("0.50", "5", "5 USDC"); smallest units only as <digits>units ("500000units")';

export type MoneyOptions = {
  /** Whether 0 means something here (an overage price, a devnet balance); default: refused. */
  allowZero?: boolean | undefined;
  /** The token's decimals (default USDC's 6); `units` are always the token's smallest unit. */
  decimals?: number | undefined;
};

const USDC_TEXT = /^([0-9]+)(?:\.([0-9]+))?$/;
const UNITS_TEXT = /^([0-9]+)\s*units$/i;
const DECIMAL_UNITS_TEXT = /^([0-9]+(?:\.[0-9]+)?)\s*units$/i;
const USDC_SUFFIX = /\s*usdc$/i;
// 2^256 − 1 has 78 digits; longer text is refused before BigInt() sees it.
const MAX_TEXT_LENGTH = 200;

function refuse(source: string, text: string, why: string): TollgateError {
  return new TollgateError("InvalidRequest", `${source}: "${text.slice(0, 100)}" ${why}`, {
    details: { source, text: text.slice(0, 100) },
  });
}

/** The whole and fractional digits as an exact amount of the smallest unit; undefined when too precise. */
function scaled(whole: string, fraction: string, decimals: number): bigint | undefined {
  if (fraction.length > decimals) return undefined;
  return BigInt(whole + fraction.padEnd(decimals, "0"));
}

/** `"1.5units"`: the whole-units reading refused, the USDC reading offered. */
function refuseFractionalUnits(
  source: string,
  text: string,
  number: string,
  decimals: number,
): TollgateError {
  const [whole = "0", fraction = ""] = number.split(".");
  const asUsdc = scaled(whole, fraction, decimals);
  const hint = asUsdc === undefined ? "" : ` (if you meant ${number} USDC, that is ${asUsdc}units)`;
  return refuse(source, text, `is not a whole number of smallest units${hint}`);
}

/** `"1.0000001"`: finer than the smallest unit as USDC, and not a whole number as units either. */
function refuseTooPrecise(source: string, text: string, decimals: number): TollgateError {
  return refuse(
    source,
    text,
    `has more than ${decimals} decimals: as USDC it is finer than the smallest unit (${formatUnitsExact(1n, decimals)}), and smallest units are whole numbers written like "500000units"`,
  );
}

/** The amount `text` writes, before the zero rule; throws a refusal naming `source`. */
function readAmount(source: string, text: string, decimals: number): bigint {
  const units = UNITS_TEXT.exec(text);
  if (units !== null) return BigInt(units[1]!);
  const fractionalUnits = DECIMAL_UNITS_TEXT.exec(text);
  if (fractionalUnits !== null) throw refuseFractionalUnits(source, text, fractionalUnits[1]!, decimals);
  const usdc = USDC_TEXT.exec(text.replace(USDC_SUFFIX, ""));
  if (usdc === null) throw refuse(source, text, `is not an amount: ${MONEY_NOTATION}`);
  const value = scaled(usdc[1]!, usdc[2] ?? "", decimals);
  if (value === undefined) throw refuseTooPrecise(source, text, decimals);
  return value;
}

/**
 * An amount of money from `source` (a flag such as `--total`, an env var, a config key) in the token's
 * smallest unit. Refuses negatives, zero unless `allowZero`, more decimals than the token has, values
 * above uint256 and anything not in the notation, each with `InvalidRequest` naming `source`.
 *
 * @example
 * parseMoney("0.50", "--per-call") // 500000n
 * parseMoney("500000units", "--per-call") // 500000n
 * parseMoney("50000", "--total") // 50000000000n: bare digits are USDC
 */
export function parseMoney(text: string, source: string, options: MoneyOptions = {}): bigint {
  const decimals = options.decimals ?? USDC_DECIMALS;
  const trimmed = text.trim();
  if (trimmed === "") throw refuse(source, text, `is empty: ${MONEY_NOTATION}`);
  if (trimmed.length > MAX_TEXT_LENGTH) throw refuse(source, text, "is too long to be an amount");
  if (trimmed.startsWith("-")) throw refuse(source, text, "is negative");
  const value = readAmount(source, trimmed, decimals);
  if (value > MAX_UINT256)
    throw refuse(source, text, "is above the largest amount a token holds (2^256 - 1)");
  if (value === 0n && options.allowZero !== true) throw refuse(source, text, "must be above zero");
  return value;
}

/**
 * A count that is not money (a plan's included units): a whole number of 0 or more, from `source`.
 * Throws `InvalidRequest` naming `source` otherwise.
 */
export function parseCount(text: string, source: string): bigint {
  const trimmed = text.trim();
  if (!/^[0-9]{1,78}$/.test(trimmed) || BigInt(trimmed) > MAX_UINT256) {
    throw refuse(source, text, "is not a count: a whole number of 0 or more, like 1000");
  }
  return BigInt(trimmed);
}
