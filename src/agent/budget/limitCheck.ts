/**
 * The limits check: whether a spend fits the headroom a report leaves (`budgetHeadroom`). Pure but for
 * the log line of a refusal; the caller runs it on a report read under the agent's lock.
 */
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { budgetHeadroom } from "./budgetHeadroom.ts";
import type { ApprovalRequest, LedgerLogger } from "./budgetLedgerTypes.ts";
import type { AgentId } from "./budgetLimits.ts";
import type { BudgetReport } from "./budgetReport.ts";
import { budgetExceeded } from "./ledgerErrors.ts";

export type LimitCheck = {
  /** The report, if `target` fits every limit; throws `BudgetExceeded` otherwise or without a budget. */
  assertFits(report: BudgetReport | undefined, agent: AgentId, target: ApprovalRequest): BudgetReport;
  /**
   * The limits a standing hold is checked against: per provider, daily and total (a hold is not one
   * call, and the subscription commitment ceiling is checked on the period price when subscribing).
   */
  assertHoldFits(report: BudgetReport | undefined, agent: AgentId, target: ApprovalRequest): BudgetReport;
};

export function createLimitCheck(logger: LedgerLogger | undefined): LimitCheck {
  function assertFits(report: BudgetReport | undefined, agent: AgentId, target: ApprovalRequest) {
    if (report === undefined) {
      throw new TollgateError(ErrorCode.BudgetExceeded, `agent "${agent}" has no budget: set one first`, {
        details: { agent, limit: "budget", requested: target.amount.toString() },
      });
    }
    const failed = budgetHeadroom(report, target).filter((h) => target.amount > h.room);
    if (failed.length > 0) {
      const error = budgetExceeded(agent, target.amount, target, failed);
      logger?.info({ agent, ...error.details }, "budget: spend refused");
      throw error;
    }
    return report;
  }

  function assertHoldFits(report: BudgetReport | undefined, agent: AgentId, target: ApprovalRequest) {
    if (report === undefined) return assertFits(report, agent, target);
    const failed = budgetHeadroom(report, { provider: target.provider, kind: "metered" })
      .filter((h) => h.limit !== "perCall")
      .filter((h) => target.amount > h.room);
    if (failed.length > 0) {
      const error = budgetExceeded(agent, target.amount, target, failed);
      logger?.info({ agent, ...error.details }, "budget: hold refused");
      throw error;
    }
    return report;
  }

  return { assertFits, assertHoldFits };
}
