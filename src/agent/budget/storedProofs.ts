/**
 * Proofs of lost-answer payments that settled, kept in the agent's store for the next call to the same
 * request target (migration 0175; docs/budgets.md, "Payments whose answer was lost"). The process that
 * reads a pending payment back as settled — the paid tool's next call, the subscription keeper's look,
 * the end of `tollgate run` — keeps its proof here; any process of the agent then redeems it.
 *
 * Invariant: a proof is handed to one call only (`takeStoredProof` deletes the row it returns, in one
 * statement), so two processes never present the same proof.
 */
import { z } from "zod";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";

export type StoredProof = {
  /** The `X-PAYMENT` header value. */
  header: string;
  /** Unix seconds after which the gate refuses it. */
  exp: number;
  /** Smallest units. */
  amount: bigint;
  transaction?: string | undefined;
};

/** Keeps a settled payment's proof for `target` (idempotent by the payment's nonce). */
export async function keepStoredProof(
  q: Queryable,
  p: { agent: string; target: string; nonce: string; proof: StoredProof; now: Date },
): Promise<void> {
  await q.query(
    `INSERT INTO agent_redeemable_proofs (nonce, agent, target, header, amount, transaction, exp, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (nonce) DO NOTHING`,
    [
      p.nonce.toLowerCase(),
      p.agent,
      p.target,
      p.proof.header,
      p.proof.amount,
      p.proof.transaction ?? null,
      p.proof.exp,
      p.now,
    ],
  );
}

const RowSchema = z.object({
  header: z.string(),
  amount: BigintColumnSchema,
  transaction: z.string().nullable(),
  exp: BigintColumnSchema,
});

/**
 * Takes (removes and returns) a kept proof for `target` still valid at `minExp` (unix seconds), the
 * oldest first; proofs of `target` that expired before `minExp` are dropped on the way.
 */
export async function takeStoredProof(
  q: Queryable,
  p: { agent: string; target: string; minExp: number },
): Promise<StoredProof | undefined> {
  // One statement (a paid call's hot path): drops the expired ones and takes the oldest valid one.
  const [row] = await queryParsed(
    q,
    RowSchema,
    `WITH expired AS (
       DELETE FROM agent_redeemable_proofs WHERE agent = $1 AND target = $2 AND exp < $3
     )
     DELETE FROM agent_redeemable_proofs
      WHERE nonce = (SELECT nonce FROM agent_redeemable_proofs WHERE agent = $1 AND target = $2 AND exp >= $3
                      ORDER BY created_at, nonce LIMIT 1 FOR UPDATE SKIP LOCKED)
      RETURNING header, amount, transaction, exp`,
    [p.agent, p.target, p.minExp],
  );
  if (row === undefined) return undefined;
  return {
    header: row.header,
    amount: row.amount,
    exp: Number(row.exp),
    ...(row.transaction === null ? {} : { transaction: row.transaction }),
  };
}
