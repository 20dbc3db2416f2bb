/**
 * Spend approval during a model run. The orchestrator asks before a paid call whose listed price is
 * above the agent's threshold: on the LangChain path through a human-in-the-loop interrupt (the run
 * pauses, the caller asks someone, the run resumes with the answer). A yes is a *grant* scoped to that
 * one call — an AsyncLocalStorage value seen by everything the call runs — up to the amount asked
 * about; the budget ledger's approval hook (`approvalHook`) accepts a spend inside a grant and asks
 * its fallback (or refuses) for any other. So the ledger's check stays the one that holds money back,
 * and nobody is asked twice for the same call.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { ApprovalRequest } from "../budget/createBudgetLedger.ts";

/** What a person is asked about a paid call before it is made. */
export type SpendApprovalRequest = {
  /** The agent whose budget pays. */
  agent: string | undefined;
  tool: string;
  callId: string;
  args: Record<string, unknown>;
  /** The seller (its market identity). */
  seller: string;
  /** The most the call may reserve (smallest unit): its largest listed one-time or period price. */
  maxAmount: bigint;
  /** The listed prices in words, as the model read them. */
  price: string;
  /** The agent's threshold (smallest unit) this call is above. */
  threshold: bigint;
};

/** Answers a spend-approval request: true to allow the call. */
export type SpendApprover = (request: SpendApprovalRequest) => Promise<boolean> | boolean;

type Grant = { callId: string; upTo: bigint };

const grants = new AsyncLocalStorage<Grant>();

/** Runs `task` with a grant: spends up to `upTo` made inside it are approved. */
export function withSpendGrant<T>(grant: Grant, task: () => Promise<T>): Promise<T> {
  return grants.run(grant, task);
}

/** The grant of the call running now, if it was approved. */
export function currentSpendGrant(): Grant | undefined {
  return grants.getStore();
}

/**
 * The ledger's approval hook for an agent run by an orchestrator: a spend inside an approved call's
 * grant is allowed up to the amount approved (a 402 asking more than was approved is refused); any
 * other spend above the threshold goes to `fallback` (for example a terminal prompt, or a script's
 * own calls), and is refused without one.
 *
 * @example
 * createBudgetLedger({ store, clock, approval: { threshold, hook: approvalHook(askOnTerminal) } });
 */
export function approvalHook(
  fallback?: ((request: ApprovalRequest) => Promise<boolean>) | undefined,
): (request: ApprovalRequest) => Promise<boolean> {
  return async (request) => {
    const grant = currentSpendGrant();
    if (grant !== undefined) {
      // A subscription comes as one question (first period + hold, `hold` naming the latter): the grant
      // covers each part up to what was approved, as it did when they were asked about separately.
      const hold = request.hold ?? 0n;
      return request.amount - hold <= grant.upTo && hold <= grant.upTo;
    }
    return fallback === undefined ? false : fallback(request);
  };
}
