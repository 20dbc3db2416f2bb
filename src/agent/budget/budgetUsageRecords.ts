/** What an agent has spent, reserved, subscribed to and holds, read from the store for its report. */
import { z } from "zod";
import { BigintColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import { type AgentId, SpendKindSchema } from "./budgetLimits.ts";
import type { BudgetUsage } from "./budgetReport.ts";
import { HoldRowSchema } from "./holdRecords.ts";

const DAY_MS = 86_400_000;

const TallyRowSchema = z.object({ provider: z.string(), kind: SpendKindSchema, spent: BigintColumnSchema });
const OpenRowSchema = z.object({
  provider: z.string(),
  kind: SpendKindSchema,
  ref: z.string().nullable(),
  reserved: BigintColumnSchema,
  reserved_at: TimestampColumnSchema,
});
const SubscriptionRowSchema = z.object({ ref: z.string(), provider: z.string(), amount: BigintColumnSchema });

/** The agent's usage at `now`; inside the transaction that holds its lock, so it agrees with the checks. */
export async function readBudgetUsage(tx: Queryable, agent: AgentId, now: Date): Promise<BudgetUsage> {
  const dayStart = new Date(now.getTime() - DAY_MS);
  const totals = await queryParsed(
    tx,
    TallyRowSchema,
    "SELECT provider, kind, spent FROM agent_spend_totals WHERE agent = $1",
    [agent],
  );
  // The rolling day is (now − 24 h, now]: a spend reserved exactly 24 h ago has left it.
  const daily = await queryParsed(
    tx,
    TallyRowSchema,
    `SELECT provider, kind, sum(committed) AS spent FROM agent_spends
      WHERE agent = $1 AND status = 'committed' AND reserved_at > $2
      GROUP BY provider, kind`,
    [agent, dayStart],
  );
  const open = await queryParsed(
    tx,
    OpenRowSchema,
    `SELECT provider, kind, ref, reserved, reserved_at FROM agent_spends
      WHERE agent = $1 AND status = 'reserved' AND expires_at > $2`,
    [agent, now],
  );
  const activeSubscriptions = await queryParsed(
    tx,
    SubscriptionRowSchema,
    "SELECT ref, provider, amount FROM agent_subscriptions WHERE agent = $1 AND active ORDER BY ref",
    [agent],
  );
  const holds = await queryParsed(
    tx,
    HoldRowSchema,
    "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND held > 0 ORDER BY ref",
    [agent],
  );
  return {
    totals,
    daily,
    holds,
    open: open.map((o) => ({
      provider: o.provider,
      kind: o.kind,
      ref: o.ref ?? undefined,
      amount: o.reserved,
      inDay: o.reserved_at.getTime() > dayStart.getTime(),
    })),
    activeSubscriptions,
  };
}
