/**
 * The agent's subscriptions as rows of `agent_plan_subscriptions` (migration 0074). The store, not a
 * process's memory, says what a wallet holds: a partial unique index allows one live row (`claimed`,
 * `active` or `paused`) per (subscriber, manager, plan), and a subscribe starts by inserting its
 * `claimed` row, so two processes (or two agents on one wallet) cannot both subscribe to a plan.
 */
import { z } from "zod";
import { BigintColumnSchema, TimestampColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";

/** Built once: a zod object schema compiles its parser on first use. */
const HeldRowSchema = z.object({ held: BigintColumnSchema });

export const AgentSubscriptionStatusSchema = z.enum(["claimed", "active", "paused", "ended"]);
export type AgentSubscriptionStatus = z.infer<typeof AgentSubscriptionStatusSchema>;

const RowSchema = z.object({
  id: z.string(),
  subscriber: z.string(),
  manager: z.string(),
  plan_id: z.string(),
  agent: z.string(),
  provider: z.string(),
  token: z.string().nullable(),
  subscription_id: z.string().nullable(),
  status: AgentSubscriptionStatusSchema,
  from_block: BigintColumnSchema,
  recorded_first: BigintColumnSchema,
  claimed_at: TimestampColumnSchema,
  note: z.string().nullable(),
});

export type AgentSubscriptionRecord = {
  /** The claim's id; the budget's hold for the subscription is `holdRefOf(id)`. */
  id: string;
  subscriber: string;
  manager: string;
  planId: string;
  agent: string;
  provider: string;
  /** The plan's token (lowercase); undefined on a row written before tokens were kept. */
  token: string | undefined;
  subscriptionId: bigint | undefined;
  status: AgentSubscriptionStatus;
  fromBlock: bigint;
  /** What the ledger recorded outside the hold (the first period); pulls beyond it go to the hold. */
  recordedFirst: bigint;
  claimedAt: Date;
  note: string | undefined;
};

const COLUMNS =
  "id, subscriber, manager, plan_id, agent, provider, token, subscription_id, status, from_block, recorded_first, claimed_at, note";

function recordOf(row: z.infer<typeof RowSchema>): AgentSubscriptionRecord {
  return {
    id: row.id,
    subscriber: row.subscriber,
    manager: row.manager,
    planId: row.plan_id,
    agent: row.agent,
    provider: row.provider,
    token: row.token ?? undefined,
    subscriptionId: row.subscription_id === null ? undefined : BigInt(row.subscription_id),
    status: row.status,
    fromBlock: row.from_block,
    recordedFirst: row.recorded_first,
    claimedAt: row.claimed_at,
    note: row.note ?? undefined,
  };
}

/** The budget hold of a stored subscription. */
export function holdRefOf(id: string): string {
  return `subscription:${id}`;
}

export type PlanKey = { subscriber: string; manager: string; planId: string };

/** The live row (claimed, active or paused) of a wallet's plan, if any. */
export async function findLiveSubscription(
  q: Queryable,
  key: PlanKey,
  lock = false,
): Promise<AgentSubscriptionRecord | undefined> {
  const row = await queryOneParsed(
    q,
    RowSchema,
    `SELECT ${COLUMNS} FROM agent_plan_subscriptions
      WHERE subscriber = $1 AND manager = $2 AND plan_id = $3 AND status IN ('claimed', 'active', 'paused')
      ${lock ? "FOR UPDATE" : ""}`,
    [key.subscriber.toLowerCase(), key.manager.toLowerCase(), key.planId],
  );
  return row === undefined ? undefined : recordOf(row);
}

/** Inserts a claim; false when the wallet already has a live row for the plan. */
export async function claimSubscription(
  q: Queryable,
  claim: PlanKey & {
    id: string;
    agent: string;
    provider: string;
    token: string;
    fromBlock: bigint;
    now: Date;
  },
): Promise<boolean> {
  const rows = await q.query(
    `INSERT INTO agent_plan_subscriptions
       (id, subscriber, manager, plan_id, agent, provider, status, from_block, claimed_at, updated_at, token)
     VALUES ($1, $2, $3, $4, $5, $6, 'claimed', $7, $8, $8, $9)
     ON CONFLICT (subscriber, manager, plan_id) WHERE status IN ('claimed', 'active', 'paused') DO NOTHING
     RETURNING id`,
    [
      claim.id,
      claim.subscriber.toLowerCase(),
      claim.manager.toLowerCase(),
      claim.planId,
      claim.agent,
      claim.provider.toLowerCase(),
      claim.fromBlock,
      claim.now,
      claim.token.toLowerCase(),
    ],
  );
  return rows.length > 0;
}

/** Takes over a stale claim (its process died); false when someone else took or finished it first. */
export async function renewClaim(q: Queryable, id: string, staleBefore: Date, now: Date): Promise<boolean> {
  const rows = await q.query(
    `UPDATE agent_plan_subscriptions SET claimed_at = $3, updated_at = $3
      WHERE id = $1 AND status = 'claimed' AND claimed_at < $2 RETURNING id`,
    [id, staleBefore, now],
  );
  return rows.length > 0;
}

/** The claim became a subscription on chain. */
export async function activateSubscription(
  q: Queryable,
  id: string,
  p: {
    subscriptionId: bigint;
    recordedFirst: bigint;
    fromBlock?: bigint | undefined;
    now: Date;
    note?: string;
  },
): Promise<void> {
  await q.query(
    `UPDATE agent_plan_subscriptions SET status = 'active', subscription_id = $2, recorded_first = $3,
        from_block = coalesce($4, from_block), updated_at = $5, note = $6
      WHERE id = $1`,
    [id, p.subscriptionId.toString(), p.recordedFirst, p.fromBlock ?? null, p.now, p.note ?? null],
  );
}

export async function setSubscriptionStatus(
  q: Queryable,
  id: string,
  status: AgentSubscriptionStatus,
  now: Date,
  note?: string,
): Promise<void> {
  await q.query(
    "UPDATE agent_plan_subscriptions SET status = $2, updated_at = $3, note = coalesce($4, note) WHERE id = $1",
    [id, status, now, note ?? null],
  );
}

/** Drops a claim whose subscribe failed before anything happened on chain. */
export async function dropClaim(q: Queryable, id: string): Promise<void> {
  await q.query("DELETE FROM agent_plan_subscriptions WHERE id = $1 AND status = 'claimed'", [id]);
}

/** An agent's subscriptions that are not ended (for the watcher), oldest first. */
export async function listLiveSubscriptions(q: Queryable, agent: string): Promise<AgentSubscriptionRecord[]> {
  const rows = await queryParsed(
    q,
    RowSchema,
    `SELECT ${COLUMNS} FROM agent_plan_subscriptions
      WHERE agent = $1 AND status IN ('claimed', 'active', 'paused') ORDER BY claimed_at, id`,
    [agent],
  );
  return rows.map(recordOf);
}

/** Every subscription of an agent, ended ones too, newest first. */
export async function listSubscriptions(q: Queryable, agent: string): Promise<AgentSubscriptionRecord[]> {
  const rows = await queryParsed(
    q,
    RowSchema,
    `SELECT ${COLUMNS} FROM agent_plan_subscriptions WHERE agent = $1 ORDER BY claimed_at DESC, id`,
    [agent],
  );
  return rows.map(recordOf);
}

/** Records the token of a row written before tokens were kept (the plan's, read from the chain). */
export async function setSubscriptionToken(q: Queryable, id: string, token: string): Promise<void> {
  await q.query("UPDATE agent_plan_subscriptions SET token = $2 WHERE id = $1 AND token IS NULL", [
    id,
    token.toLowerCase(),
  ]);
}

/**
 * What the wallet's live subscriptions on this manager in `token` may still pull (their holds), but
 * `exceptId`'s: a permit sets one token's allowance absolutely, so a new approval must keep room for
 * the others in that token, and only those (another token's holds are approved on that token).
 * A row whose token is not known yet counts in none (the watcher fills it in before topping up).
 */
export async function otherHoldsOfWallet(
  q: Queryable,
  p: { subscriber: string; manager: string; token: string; exceptId: string },
): Promise<bigint> {
  const row = await queryOneParsed(
    q,
    HeldRowSchema,
    `SELECT coalesce(sum(h.held), 0) AS held FROM agent_plan_subscriptions s
       JOIN agent_holds h ON h.agent = s.agent AND h.ref = 'subscription:' || s.id
      WHERE s.subscriber = $1 AND s.manager = $2 AND s.token = $3 AND s.status IN ('active', 'paused')
        AND s.id <> $4`,
    [p.subscriber.toLowerCase(), p.manager.toLowerCase(), p.token.toLowerCase(), p.exceptId],
  );
  return row?.held ?? 0n;
}
