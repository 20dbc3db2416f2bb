/**
 * Standing holds in the store (`agent_holds`): what a subscription may still pull on chain (`held`) and
 * what it has pulled (`charged`), one row per agent and ref. Callers hold the agent's row lock.
 */
import { z } from "zod";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { AgentId } from "./budgetLimits.ts";

export const HoldRowSchema = z.object({
  ref: z.string(),
  provider: z.string(),
  held: BigintColumnSchema,
  charged: BigintColumnSchema,
});
export type HoldRow = z.infer<typeof HoldRowSchema>;
const HeldRowSchema = z.object({ held: BigintColumnSchema });

/** Grows the ref's hold by `amount` (opening it, with its provider, if new); returns what it now holds. */
export async function addToHold(
  tx: Queryable,
  hold: { agent: AgentId; ref: string; provider: string; amount: bigint; at: Date },
): Promise<bigint> {
  const rows = await queryParsed(
    tx,
    HeldRowSchema,
    `INSERT INTO agent_holds (agent, ref, provider, held, charged, updated_at) VALUES ($1, $2, $3, $4, 0, $5)
     ON CONFLICT (agent, ref) DO UPDATE SET held = agent_holds.held + EXCLUDED.held, updated_at = EXCLUDED.updated_at
     RETURNING held`,
    [hold.agent, hold.ref, hold.provider.toLowerCase(), hold.amount, hold.at],
  );
  return rows[0]!.held;
}

/** The ref's hold, its row locked for the update that follows; `undefined` if it never had one. */
export async function lockHold(tx: Queryable, agent: AgentId, ref: string): Promise<HoldRow | undefined> {
  return queryOneParsed(
    tx,
    HoldRowSchema,
    "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND ref = $2 FOR UPDATE",
    [agent, ref],
  );
}

/** Sets what the ref's hold still holds and what was charged under it. */
export async function updateHold(
  tx: Queryable,
  hold: { agent: AgentId; ref: string; held: bigint; charged: bigint; at: Date },
): Promise<void> {
  await tx.query(
    "UPDATE agent_holds SET held = $3, charged = $4, updated_at = $5 WHERE agent = $1 AND ref = $2",
    [hold.agent, hold.ref, hold.held, hold.charged, hold.at],
  );
}

/** Empties the ref's hold; returns what it held before (0 when there was none). */
export async function emptyHold(tx: Queryable, agent: AgentId, ref: string, at: Date): Promise<bigint> {
  const rows = await queryParsed(
    tx,
    HeldRowSchema,
    `UPDATE agent_holds h SET held = 0, updated_at = $3 FROM (SELECT held FROM agent_holds WHERE agent = $1 AND ref = $2) old
      WHERE h.agent = $1 AND h.ref = $2 RETURNING old.held`,
    [agent, ref, at],
  );
  return rows[0]?.held ?? 0n;
}

/** The ref's hold as it stands, without a lock. */
export async function readHold(db: Queryable, agent: AgentId, ref: string): Promise<HoldRow | undefined> {
  return queryOneParsed(
    db,
    HoldRowSchema,
    "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND ref = $2",
    [agent, ref],
  );
}
