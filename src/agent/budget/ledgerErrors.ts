/** The budget ledger's input parsing and the errors it refuses a spend with. */
import type { z } from "zod";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Headroom } from "./budgetHeadroom.ts";
import type { ApprovalRequest } from "./budgetLedgerTypes.ts";
import type { AgentId } from "./budgetLimits.ts";

/** An amount as the ledger's messages show it. */
export function usdc(amount: bigint): string {
  return `${formatUnitsExact(amount)} USDC`;
}

/** Parses a caller's input; bad input is an `InvalidRequest` naming the first issue. */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new TollgateError(ErrorCode.InvalidRequest, `invalid ${what}: ${parsed.error.issues[0]?.message}`, {
      details: { issues: parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })) },
    });
  }
  return parsed.data;
}

/** `BudgetExceeded` for a spend the limits in `failed` refuse (the first one names the limit). */
export function budgetExceeded(agent: AgentId, amount: bigint, target: ApprovalRequest, failed: Headroom[]) {
  const first = failed[0]!;
  const what =
    first.limit === "perProvider" ? `per-provider limit for ${target.provider}` : `${first.limit} limit`;
  const message =
    first.limit === "perCall"
      ? `${usdc(amount)} is above agent "${agent}"'s per-call limit of ${usdc(first.limitAmount)}`
      : `${usdc(amount)} would exceed agent "${agent}"'s ${what} of ${usdc(first.limitAmount)} (${usdc(first.used)} already spent or reserved)`;
  return new TollgateError(ErrorCode.BudgetExceeded, message, {
    details: {
      agent,
      limit: first.limit,
      limitAmount: first.limitAmount.toString(),
      used: first.used.toString(),
      requested: amount.toString(),
      provider: target.provider,
      kind: target.kind,
      exceeded: failed.map((h) => h.limit),
    },
  });
}
