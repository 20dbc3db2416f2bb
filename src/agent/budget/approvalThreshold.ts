/**
 * An agent's spend-approval threshold, stored with its budget (`agent_budgets.approve_above`,
 * migration 0077): spends strictly above it need someone's yes. `tollgate budget set … --approve-above`
 * writes it; `tollgate run` turns it into the ledger's approval (`approvalFor`) with a hook that asks
 * on the terminal, or refuses when no one can answer.
 */
import { z } from "zod";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import { AgentIdSchema } from "./budgetLimits.ts";
import type { ApprovalRequest, BudgetApproval } from "./createBudgetLedger.ts";

const RowSchema = z.object({ approve_above: BigintColumnSchema.nullable() });

function agentId(agent: string): string {
  const parsed = AgentIdSchema.safeParse(agent);
  if (!parsed.success) {
    throw new TollgateError(
      ErrorCode.InvalidRequest,
      `invalid agent name: ${parsed.error.issues[0]?.message}`,
    );
  }
  return parsed.data;
}

/** The stored threshold; `undefined` when none is set (or the agent has no budget). */
export async function getApprovalThreshold(store: Store, agent: string): Promise<bigint | undefined> {
  const row = await queryOneParsed(
    store,
    RowSchema,
    "SELECT approve_above FROM agent_budgets WHERE agent = $1",
    [agentId(agent)],
  );
  return row?.approve_above ?? undefined;
}

/**
 * Stores the threshold (`null` removes it). The agent must have a budget: a threshold without limits
 * would promise a control the run never applies.
 */
export async function setApprovalThreshold(
  store: Store,
  agent: string,
  threshold: bigint | null,
): Promise<void> {
  if (threshold !== null && threshold < 0n) {
    throw new TollgateError(ErrorCode.InvalidRequest, "the approval threshold must not be negative");
  }
  const id = agentId(agent);
  const updated = await store.query(
    "UPDATE agent_budgets SET approve_above = $2, updated_at = now() WHERE agent = $1 RETURNING agent",
    [id, threshold],
  );
  if (updated.length === 0) {
    throw new TollgateError(ErrorCode.NotFound, `agent "${id}" has no budget: set its limits first`);
  }
}

/**
 * The ledger's approval for an agent whose budget stores a threshold, or `undefined` when it stores
 * none. `hook` answers each spend above the threshold; without one every such spend is refused
 * (`ApprovalDenied`), never let through.
 */
export async function approvalFor(
  store: Store,
  agent: string,
  hook: ((request: ApprovalRequest) => Promise<boolean>) | undefined,
): Promise<BudgetApproval | undefined> {
  const threshold = await getApprovalThreshold(store, agent);
  if (threshold === undefined) return undefined;
  return { threshold, hook: hook ?? (async () => false) };
}
