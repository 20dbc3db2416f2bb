/**
 * Spends in the store: one `agent_spends` row per reservation (or per charge under a standing hold),
 * the running `agent_spend_totals`, and the `agent_subscriptions` a committed subscription spend
 * starts. Writers run inside the transaction that holds the agent's row lock.
 */
import { z } from "zod";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { SpendOutcome } from "./budgetLedgerTypes.ts";
import { lockAgentBudget } from "./budgetLimitRecords.ts";
import { type AgentId, type SpendKind, SpendKindSchema } from "./budgetLimits.ts";

const AgentRowSchema = z.object({ agent: z.string() });
const SpendRowSchema = z.object({
  id: z.string(),
  agent: z.string(),
  provider: z.string(),
  kind: SpendKindSchema,
  ref: z.string().nullable(),
  reserved: BigintColumnSchema,
  committed: BigintColumnSchema.nullable(),
  status: z.enum(["reserved", "committed", "released"]),
  expires_at: TimestampColumnSchema,
  late: z.boolean(),
  parent_id: z.string().nullable(),
});
export type SpendRow = z.infer<typeof SpendRowSchema>;

/** The outcome a settled spend row stands for. */
export function outcomeOf(row: SpendRow): SpendOutcome {
  return {
    id: row.id,
    status: row.status === "committed" ? "committed" : "released",
    reserved: row.reserved,
    committed: row.committed ?? 0n,
    late: row.late,
  };
}

/** The spend `id`, read after taking its agent's lock; throws `NotFound` if there is none. */
export async function lockSpend(tx: Queryable, id: string): Promise<SpendRow> {
  const owner = await queryOneParsed(tx, AgentRowSchema, "SELECT agent FROM agent_spends WHERE id = $1", [
    id,
  ]);
  if (owner === undefined) {
    throw new TollgateError(ErrorCode.NotFound, "no such reservation", { details: { id } });
  }
  // The agent's lock first, as reserve takes it: reserve's reads must not see a half-applied commit.
  await lockAgentBudget(tx, owner.agent);
  const row = await queryOneParsed(
    tx,
    SpendRowSchema,
    `SELECT id, agent, provider, kind, ref, reserved, committed, status, expires_at, late, parent_id
       FROM agent_spends WHERE id = $1`,
    [id],
  );
  return row!;
}

/** A new reservation: holds `amount` until `expiresAt`, drawn from the sale `parentId` if set. */
export async function insertReservation(
  tx: Queryable,
  spend: {
    id: string;
    agent: AgentId;
    provider: string;
    kind: SpendKind;
    ref: string | undefined;
    amount: bigint;
    reservedAt: Date;
    expiresAt: Date;
    parentId: string | null;
  },
): Promise<void> {
  await tx.query(
    `INSERT INTO agent_spends (id, agent, provider, kind, ref, reserved, reserved_at, expires_at, parent_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      spend.id,
      spend.agent,
      spend.provider.toLowerCase(),
      spend.kind,
      spend.ref,
      spend.amount,
      spend.reservedAt,
      spend.expiresAt,
      spend.parentId,
    ],
  );
}

/** A spend that already happened (money a standing hold moved): recorded committed at once. */
export async function insertSettledSpend(
  tx: Queryable,
  spend: {
    id: string;
    agent: AgentId;
    provider: string;
    kind: SpendKind;
    ref: string;
    amount: bigint;
    at: Date;
  },
): Promise<void> {
  await tx.query(
    `INSERT INTO agent_spends (id, agent, provider, kind, ref, reserved, committed, status, reserved_at, expires_at, settled_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6, 'committed', $7, $8, $7)`,
    [
      spend.id,
      spend.agent,
      spend.provider,
      spend.kind,
      spend.ref,
      spend.amount,
      spend.at,
      new Date(spend.at.getTime() + 1000),
    ],
  );
}

/** Marks the reservation committed for `amount` (flagged `late` when committed after its expiry). */
export async function markCommitted(
  tx: Queryable,
  id: string,
  commit: { amount: bigint; at: Date; late: boolean },
): Promise<void> {
  await tx.query(
    "UPDATE agent_spends SET status = 'committed', committed = $2, settled_at = $3, late = $4 WHERE id = $1",
    [id, commit.amount, commit.at, commit.late],
  );
}

/** Marks the reservation released: it stops counting. */
export async function markReleased(tx: Queryable, id: string, at: Date): Promise<void> {
  await tx.query("UPDATE agent_spends SET status = 'released', settled_at = $2 WHERE id = $1", [id, at]);
}

/** Moves the reservation's expiry to `until`. */
export async function extendReservation(tx: Queryable, id: string, until: Date): Promise<void> {
  await tx.query("UPDATE agent_spends SET expires_at = $2 WHERE id = $1", [id, until]);
}

/** Adds `amount` to what the agent has spent with the provider on this kind, all time. */
export async function addToSpendTotals(
  tx: Queryable,
  spend: { agent: string; provider: string; kind: SpendKind; amount: bigint },
): Promise<void> {
  await tx.query(
    `INSERT INTO agent_spend_totals (agent, provider, kind, spent) VALUES ($1, $2, $3, $4)
     ON CONFLICT (agent, provider, kind) DO UPDATE SET spent = agent_spend_totals.spent + EXCLUDED.spent`,
    [spend.agent, spend.provider, spend.kind, spend.amount],
  );
}

/** Records the subscription `ref` active at `amount` a period (keeping its start if it already was). */
export async function startSubscription(
  tx: Queryable,
  subscription: { agent: string; ref: string; provider: string; amount: bigint; at: Date },
): Promise<void> {
  await tx.query(
    `INSERT INTO agent_subscriptions (agent, ref, provider, amount, active, started_at)
     VALUES ($1, $2, $3, $4, true, $5)
     ON CONFLICT (agent, ref) DO UPDATE SET provider = EXCLUDED.provider, amount = EXCLUDED.amount,
       started_at = CASE WHEN agent_subscriptions.active THEN agent_subscriptions.started_at
                         ELSE EXCLUDED.started_at END,
       active = true, ended_at = NULL`,
    [subscription.agent, subscription.ref, subscription.provider, subscription.amount, subscription.at],
  );
}

/** Marks the subscription `ref` ended; false if it was not active. */
export async function endSubscription(
  tx: Queryable,
  agent: AgentId,
  ref: string,
  at: Date,
): Promise<boolean> {
  const ended = await tx.query(
    "UPDATE agent_subscriptions SET active = false, ended_at = $3 WHERE agent = $1 AND ref = $2 AND active RETURNING ref",
    [agent, ref, at],
  );
  return ended.length > 0;
}
