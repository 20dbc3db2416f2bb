import { z } from "zod";

/**
 * An amount in the token's smallest unit, as on the wire (docs/protocol.md; docs/gate.md): a safe integer
 * (`500000`), a bigint (`500_000n`) or an integer string (`"500000"`), all 0.50 USDC. Decimal text
 * under `amount` is refused with a message naming both readings, never read as token text.
 */
export const AmountSchema = z
  .custom<number | bigint | string>(
    (value) => typeof value === "number" || typeof value === "bigint" || typeof value === "string",
    { error: "expected an amount in smallest units: a safe integer, a bigint or an integer string" },
  )
  .superRefine((value, ctx) => {
    const problem = amountProblem(value);
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
  });
export type Amount = z.input<typeof AmountSchema>;

/** Why a value cannot be an `amount` in smallest units, naming what the writer probably meant. */
export function amountProblem(value: unknown): string | undefined {
  if (typeof value === "bigint") return undefined;
  if (typeof value === "number") {
    if (Number.isSafeInteger(value)) return undefined;
    if (Number.isFinite(value) && !Number.isInteger(value)) {
      return `amount ${value} is not an integer number of smallest units; for ${value} USDC write price: "${value}"`;
    }
    return `amount ${value} is not a safe integer (JavaScript rounds it); write it as a bigint or an integer string of smallest units`;
  }
  if (typeof value === "string") {
    if (/^[0-9]{1,78}$/.test(value)) return undefined;
    if (/^[0-9]*\.[0-9]+$|^[0-9]+\.$/.test(value.trim())) {
      return `amount "${value}" is not an integer number of smallest units; for ${value.trim()} USDC write price: "${value.trim()}"`;
    }
    return `amount ${JSON.stringify(value.slice(0, 40))} is not an integer number of smallest units (e.g. 500000 for 0.50 USDC)`;
  }
  return "expected an amount in smallest units: a safe integer, a bigint or an integer string";
}
