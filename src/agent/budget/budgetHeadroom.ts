import { sameAddress } from "../../protocol/address.ts";
import type { BudgetLimitName, SpendKind } from "./budgetLimits.ts";
import type { BudgetReport } from "./budgetReport.ts";

/** The spend being considered: to whom, how, and (for subscriptions) which subscription. */
export type SpendTarget = { provider: string; kind: SpendKind; ref?: string | undefined };

/** How much room one limit leaves for the target spend: `room = max(0, limitAmount − used)`. */
export type Headroom = { limit: BudgetLimitName; limitAmount: bigint; used: bigint; room: bigint };

/**
 * The room every applicable limit leaves for a spend, in checking order (per call, per provider,
 * daily, total, subscription commitment). A spend of `amount` fits exactly when `amount <= room` for
 * every entry; `createBudgetLedger().reserve` refuses it with the first entry that does not fit.
 *
 * - The per-call limit applies to one-time and metered spends; a subscription period is bounded by
 *   the subscription commitment ceiling instead (otherwise a per-call limit meant for single calls
 *   would forbid every plan).
 * - A subscription spend whose `ref` names a subscription already active or reserved replaces that
 *   commitment (a renewal or a retry), so that subscription's own amount is not counted as used.
 */
export function budgetHeadroom(report: BudgetReport, target: SpendTarget): Headroom[] {
  const { limits } = report;
  const out: Headroom[] = [];
  const add = (limit: BudgetLimitName, limitAmount: bigint | undefined, used: bigint) => {
    if (limitAmount === undefined) return;
    out.push({ limit, limitAmount, used, room: limitAmount > used ? limitAmount - used : 0n });
  };
  if (target.kind !== "subscription") add("perCall", limits.perCall, 0n);
  const providerLimit = Object.entries(limits.perProvider ?? {}).find(([p]) =>
    sameAddress(p, target.provider),
  );
  if (providerLimit !== undefined) {
    const tally = report.perProvider.find((p) => sameAddress(p.provider, target.provider));
    add("perProvider", providerLimit[1], (tally?.spent ?? 0n) + (tally?.reserved ?? 0n));
  }
  add("daily", limits.daily, report.spent.daily + report.reserved.daily);
  add("total", limits.total, report.spent.total + report.reserved.total);
  if (target.kind === "subscription") {
    const others = (ref: string | undefined) => target.ref === undefined || ref !== target.ref;
    const used =
      report.subscriptions.active.filter((s) => others(s.ref)).reduce((a, s) => a + s.amount, 0n) +
      report.subscriptions.pending.filter((s) => others(s.ref)).reduce((a, s) => a + s.amount, 0n);
    add("maxSubscriptionCommitment", limits.maxSubscriptionCommitment, used);
  }
  return out;
}

/**
 * The largest spend the limits allow now for `target`, or `undefined` when no limit applies. A
 * snapshot: concurrent reservations may take the room before this agent reserves it.
 */
export function availableFor(report: BudgetReport, target: SpendTarget): bigint | undefined {
  let smallest: bigint | undefined;
  for (const { room } of budgetHeadroom(report, target)) {
    if (smallest === undefined || room < smallest) smallest = room;
  }
  return smallest;
}
