/**
 * The approval hook of a budget ledger: spends strictly above the threshold are asked about, outside any
 * transaction (a person may take minutes to answer), after a pre-check so a spend the limits refuse
 * anyway is never asked about; the caller checks the limits again, atomically, afterwards.
 */
import type { Clock } from "../../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import type { ApprovalRequest, BudgetApproval, LedgerLogger } from "./budgetLedgerTypes.ts";
import type { BudgetReader } from "./budgetReader.ts";
import type { BudgetReport } from "./budgetReport.ts";
import { usdc } from "./ledgerErrors.ts";

export type LedgerApproval = {
  /**
   * Asks the hook about `target` if it is above the threshold, first running `precheck` on the agent's
   * report (read under a shared lock). Throws `ApprovalDenied` when the hook says no or fails.
   */
  ask(target: ApprovalRequest, precheck: (report: BudgetReport | undefined) => unknown): Promise<void>;
  /** Remembers a standing hold approved with a subscription's first period, until `until` (ms). */
  approveHold(agent: string, ref: string, amount: bigint, until: number): void;
  /** Whether the next hold of `amount` under the ref was approved already; forgets the approval. */
  takeHoldApproval(agent: string, ref: string, amount: bigint): boolean;
};

export function createLedgerApproval(options: {
  store: Store;
  clock: Clock;
  reader: BudgetReader;
  approval: BudgetApproval | undefined;
  logger: LedgerLogger | undefined;
}): LedgerApproval {
  const { store, clock, reader, approval, logger } = options;
  /**
   * Holds approved with a subscription's first period (`withHold`), by agent and ref, until that
   * reservation expires: the next `hold` under the ref, up to the amount, is not asked about again.
   * In memory: after a restart the hold is simply asked about (never approved without a question).
   */
  const approvedHolds = new Map<string, { amount: bigint; until: number }>();
  const holdKey = (agent: string, ref: string) => `${agent}\n${ref}`;

  async function ask(target: ApprovalRequest, precheck: (report: BudgetReport | undefined) => unknown) {
    if (approval === undefined || target.amount <= approval.threshold) return;
    const { agent } = target;
    await store.transaction(async (tx) => precheck(await reader.load(tx, agent, "FOR SHARE")));
    let approved: boolean;
    try {
      approved = (await approval.hook(target)) === true;
    } catch (cause) {
      throw new TollgateError(ErrorCode.ApprovalDenied, "the approval hook failed", {
        details: { agent, requested: target.amount.toString(), threshold: approval.threshold.toString() },
        cause,
      });
    }
    if (!approved) throw denied(target, approval.threshold);
  }

  function denied(target: ApprovalRequest, threshold: bigint): TollgateError {
    logger?.info(
      { agent: target.agent, amount: target.amount.toString(), provider: target.provider },
      "budget: approval denied",
    );
    return new TollgateError(
      ErrorCode.ApprovalDenied,
      `spending ${usdc(target.amount)} needs approval (above ${usdc(threshold)}) and was denied`,
      {
        details: {
          agent: target.agent,
          requested: target.amount.toString(),
          threshold: threshold.toString(),
          provider: target.provider,
          kind: target.kind,
        },
      },
    );
  }

  function approveHold(agent: string, ref: string, amount: bigint, until: number) {
    if (approval === undefined) return;
    approvedHolds.set(holdKey(agent, ref), { amount, until });
  }

  function takeHoldApproval(agent: string, ref: string, amount: bigint) {
    const approved = approvedHolds.get(holdKey(agent, ref));
    approvedHolds.delete(holdKey(agent, ref));
    return !(approved === undefined || approved.amount < amount || clock.now() >= approved.until);
  }

  return { ask, approveHold, takeHoldApproval };
}
