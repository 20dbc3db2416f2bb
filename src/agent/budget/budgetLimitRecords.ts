/**
 * The agent's limits in the store (`agent_budgets`, `agent_provider_limits`) and its row lock: every
 * read-check-write of the ledger takes `agent_budgets … FOR UPDATE` first, so an agent's spends are
 * serialized (docs/budgets.md).
 */
import { getAddress } from "viem";
import { z } from "zod";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { AgentId, BudgetLimits } from "./budgetLimits.ts";

const LimitsRowSchema = z.object({
  total_limit: BigintColumnSchema.nullable(),
  daily_limit: BigintColumnSchema.nullable(),
  per_call_limit: BigintColumnSchema.nullable(),
  max_subscription_commitment: BigintColumnSchema.nullable(),
});
const ProviderLimitRowSchema = z.object({ provider: z.string(), limit_amount: BigintColumnSchema });

/** How the limits row is read: plainly, or taking the agent's lock. */
export type BudgetLock = "" | "FOR UPDATE" | "FOR SHARE";

/** Takes the agent's row lock (a no-op for an agent without a budget). */
export async function lockAgentBudget(tx: Queryable, agent: string): Promise<void> {
  await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [agent]);
}

/** Replaces the agent's limits, creating its budget row if new. Run inside one transaction. */
export async function writeBudgetLimits(tx: Queryable, agent: AgentId, limits: BudgetLimits): Promise<void> {
  await tx.query(
    `INSERT INTO agent_budgets (agent, total_limit, daily_limit, per_call_limit, max_subscription_commitment)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (agent) DO UPDATE SET total_limit = EXCLUDED.total_limit, daily_limit = EXCLUDED.daily_limit,
       per_call_limit = EXCLUDED.per_call_limit,
       max_subscription_commitment = EXCLUDED.max_subscription_commitment, updated_at = now()`,
    [agent, limits.total, limits.daily, limits.perCall, limits.maxSubscriptionCommitment],
  );
  await tx.query("DELETE FROM agent_provider_limits WHERE agent = $1", [agent]);
  for (const [provider, limit] of Object.entries(limits.perProvider ?? {})) {
    await tx.query("INSERT INTO agent_provider_limits (agent, provider, limit_amount) VALUES ($1, $2, $3)", [
      agent,
      provider.toLowerCase(),
      limit,
    ]);
  }
}

/** The agent's limits (taking `lock` on its row), or `undefined` when it has no budget. */
export async function readBudgetLimits(
  tx: Queryable,
  agent: AgentId,
  lock: BudgetLock,
): Promise<BudgetLimits | undefined> {
  const row = await queryOneParsed(
    tx,
    LimitsRowSchema,
    `SELECT total_limit, daily_limit, per_call_limit, max_subscription_commitment
       FROM agent_budgets WHERE agent = $1 ${lock}`,
    [agent],
  );
  if (row === undefined) return undefined;
  const providers = await queryParsed(
    tx,
    ProviderLimitRowSchema,
    "SELECT provider, limit_amount FROM agent_provider_limits WHERE agent = $1 ORDER BY provider",
    [agent],
  );
  const limits: BudgetLimits = {};
  if (row.total_limit !== null) limits.total = row.total_limit;
  if (row.daily_limit !== null) limits.daily = row.daily_limit;
  if (row.per_call_limit !== null) limits.perCall = row.per_call_limit;
  if (providers.length > 0) {
    limits.perProvider = Object.fromEntries(providers.map((p) => [getAddress(p.provider), p.limit_amount]));
  }
  if (row.max_subscription_commitment !== null) {
    limits.maxSubscriptionCommitment = row.max_subscription_commitment;
  }
  return limits;
}
