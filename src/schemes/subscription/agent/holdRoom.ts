import { budgetHeadroom } from "../../../agent/budget/budgetHeadroom.ts";
import type { BudgetReport } from "../../../agent/budget/budgetReport.ts";

/** The least room the per-provider, daily and total limits leave: what a hold may take. */
export function holdRoom(report: BudgetReport, provider: string): bigint | undefined {
  let room: bigint | undefined;
  for (const h of budgetHeadroom(report, { provider, kind: "metered" })) {
    if (h.limit === "perCall") continue;
    if (room === undefined || h.room < room) room = h.room;
  }
  return room;
}
