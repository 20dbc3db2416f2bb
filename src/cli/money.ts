/**
 * The CLI's money notation (src/protocol/money.ts, where the facilitator's configuration reads it too)
 * and the one argv fix it needs: a negative amount reaches `parseMoney` as a flag's value.
 */
export { MONEY_NOTATION, type MoneyOptions, parseCount, parseMoney } from "../protocol/money.ts";

/**
 * `argv` with `--flag -1` rewritten as `--flag=-1` for the given value flags, so that node's `parseArgs`
 * hands a negative amount to `parseMoney` (which names the flag) instead of calling it an ambiguous option.
 */
export function inlineNegativeValues(argv: readonly string[], flags: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    if (flags.includes(arg) && next !== undefined && /^-[0-9.]/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}
