/**
 * Usage batches in the store (migrations 0012, 0013): claiming pending records into a batch, the
 * compare-and-sets that queue, requeue or release it, and the writes of each record's outcome. Every
 * function runs the statements the usage settler runs, in its order, on the connection it is given
 * (usageSettler.ts states the invariants they keep).
 */
import { TollgateError } from "../../../../protocol/errors.ts";
import { queryOneParsed, queryParsed } from "../../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../../store/store.ts";
import { type UsageBatchRow, UsageBatchRowSchema, type UsageRow, UsageRowSchema } from "./usageRecords.ts";

/** The outbox kind of usage deduction batches. */
export const USAGE_KIND = "usage";

/** Attempts for a record whose whole batch transaction reverted before it fails. */
const MAX_ATTEMPTS = 3;

/** Whose batches: one chain, one SubscriptionManager and one gas key (addresses in lower case). */
export type UsageBatchScope = { chainId: number; manager: string; sender: string };

/** A batch as `openUsageBatches` reads it. */
export type OpenUsageBatch = { id: string; outbox_id: string | null; raw_tx: string | null; idle_ms: string };

/**
 * Claims up to `maxBatchSize` pending records into a new batch (`FOR UPDATE SKIP LOCKED`), or answers
 * `"held"` while they may wait for others to fill it, or `undefined` when none wait.
 */
export function claimUsageBatch(
  store: Pick<Store, "transaction">,
  scope: UsageBatchScope,
  rule: { force: boolean; maxBatchSize: number; lingerMs: number },
): Promise<{ batch: UsageBatchRow; rows: UsageRow[] } | "held" | undefined> {
  return store.transaction(async (tx) => {
    const head = await tx.query<{ waiting: string; age_ms: string | null }>(
      `SELECT count(*) AS waiting, floor(extract(epoch FROM now() - min(created_at)) * 1000)::bigint AS age_ms
         FROM usage_records WHERE status = 'pending' AND chain_id = $1 AND manager = $2`,
      [scope.chainId, scope.manager],
    );
    const waiting = Number(head[0]?.waiting ?? 0);
    if (waiting === 0) return undefined;
    // Batching rule: a batch goes when it is full or its oldest record has waited `lingerMs`; records
    // arriving together become one transaction.
    if (!rule.force && waiting < rule.maxBatchSize && Number(head[0]?.age_ms ?? 0) < rule.lingerMs) {
      return "held";
    }
    const batch = await queryOneParsed(
      tx,
      UsageBatchRowSchema,
      "INSERT INTO usage_batches (chain_id, manager, sender) VALUES ($1, $2, $3) RETURNING *",
      [scope.chainId, scope.manager, scope.sender],
    );
    if (batch === undefined) throw new TollgateError("Internal", "usage batch insert returned nothing");
    const rows = await queryParsed(
      tx,
      UsageRowSchema,
      `UPDATE usage_records SET status = 'submitted', batch_id = $1, attempts = attempts + 1, updated_at = now()
         WHERE id IN (SELECT id FROM usage_records WHERE status = 'pending' AND chain_id = $2 AND manager = $3
                      ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
         RETURNING *`,
      [batch.id, scope.chainId, scope.manager, rule.maxBatchSize],
    );
    if (rows.length === 0) {
      await tx.query("DELETE FROM usage_batches WHERE id = $1", [batch.id]);
      return undefined;
    }
    rows.sort((a, b) => a.id - b.id);
    await tx.query("UPDATE usage_batches SET item_count = $2 WHERE id = $1", [batch.id, rows.length]);
    return { batch: { ...batch, item_count: rows.length }, rows };
  });
}

/** The records of a batch, in id order. */
export function batchRows(db: Queryable, batchId: number): Promise<UsageRow[]> {
  return queryParsed(db, UsageRowSchema, "SELECT * FROM usage_records WHERE batch_id = $1 ORDER BY id", [
    batchId,
  ]);
}

/** Fails records of `batchId` that still belong to it (a batch released meanwhile fails nothing). */
export async function failBatchRecords(
  db: Queryable,
  batchId: number,
  rowIds: readonly number[],
  code: string,
  message: string,
): Promise<void> {
  if (rowIds.length === 0) return;
  await db.query(
    `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, updated_at = now()
       WHERE id = ANY($1::bigint[]) AND status = 'submitted' AND batch_id = $4`,
    [rowIds.map(String), code, message, batchId],
  );
}

/** Puts a batch's records back in the queue (failing those out of attempts) and fails the batch. */
export async function requeueBatch(
  db: Queryable,
  batchId: number,
  code: string,
  message: string,
): Promise<void> {
  await db.query(
    `UPDATE usage_records SET status = CASE WHEN attempts >= $2 THEN 'failed' ELSE 'pending' END,
         failure_code = CASE WHEN attempts >= $2 THEN $3 END,
         failure_message = CASE WHEN attempts >= $2 THEN $4 END,
         batch_id = CASE WHEN attempts >= $2 THEN batch_id END, updated_at = now()
       WHERE batch_id = $1 AND status = 'submitted'`,
    [batchId, MAX_ATTEMPTS, code, message],
  );
  await markBatchFailed(db, batchId);
}

/** Marks a batch failed, whatever its state. */
export async function markBatchFailed(db: Queryable, batchId: number): Promise<void> {
  await db.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [batchId]);
}

/** Fails a batch left with no record to send, if it is still `pending`. */
export async function closeEmptyBatch(db: Queryable, batchId: number): Promise<void> {
  await db.query(
    "UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1 AND status = 'pending'",
    [batchId],
  );
}

/**
 * Locks the batch and tells whether it is still `pending` with every one of `rows` in it: only then
 * may it be queued (or requeued). A batch released meanwhile (its records may be in another batch
 * already) is left as it is.
 */
export async function holdPending(
  tx: Queryable,
  batchId: number,
  rows: readonly UsageRow[],
): Promise<boolean> {
  const held = await tx.query(
    "SELECT id FROM usage_batches WHERE id = $1 AND status = 'pending' FOR UPDATE",
    [batchId],
  );
  if (held.length === 0) return false;
  const mine = await tx.query<{ id: string }>(
    `SELECT id FROM usage_records WHERE id = ANY($1::bigint[]) AND batch_id = $2 AND status = 'submitted'
       FOR UPDATE`,
    [rows.map((r) => String(r.id)), batchId],
  );
  return mine.length === rows.length;
}

/** Records that a batch's transaction is queued in the outbox row `outboxId`. */
export async function markBatchQueued(
  tx: Queryable,
  batchId: number,
  itemCount: number,
  outboxId: number,
): Promise<void> {
  await tx.query(
    `UPDATE usage_batches SET status = 'submitted', item_count = $2, outbox_id = $3, updated_at = now()
         WHERE id = $1`,
    [batchId, itemCount, outboxId],
  );
}

/** Settles a record by the transaction `hash`. */
export async function settleUsageRecord(db: Queryable, rowId: number, hash: string): Promise<void> {
  await db.query(
    `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), failure_code = NULL,
             failure_message = NULL, updated_at = now() WHERE id = $1`,
    [rowId, hash],
  );
}

/** Fails a record with the reason the transaction `hash` gave. */
export async function failUsageRecord(
  db: Queryable,
  rowId: number,
  failure: { code: string; message: string },
  hash: string,
): Promise<void> {
  await db.query(
    `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
             updated_at = now() WHERE id = $1`,
    [rowId, failure.code, failure.message, hash],
  );
}

/** Puts a record back in the queue, out of its batch. */
export async function requeueUsageRecord(db: Queryable, rowId: number): Promise<void> {
  await db.query(
    "UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now() WHERE id = $1",
    [rowId],
  );
}

/** Records a batch's receipt. */
export async function markBatchConfirmed(
  db: Queryable,
  batchId: number,
  receipt: { hash: string; blockNumber: bigint },
): Promise<void> {
  await db.query(
    `UPDATE usage_batches SET status = 'confirmed', tx_hash = $2, block_number = $3, updated_at = now()
       WHERE id = $1`,
    [batchId, receipt.hash, receipt.blockNumber],
  );
}

/**
 * A record of a batch whose transaction was never mined: settled by the transaction the chain's logs
 * show for its ref, or back in the queue when none does; only while it is still `submitted`.
 */
export async function resolveDroppedRecord(
  db: Queryable,
  rowId: number,
  hash: string | undefined,
): Promise<void> {
  await db.query(
    hash === undefined
      ? `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
                 WHERE id = $1 AND status = 'submitted'`
      : `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), updated_at = now()
                 WHERE id = $1 AND status = 'submitted'`,
    hash === undefined ? [rowId] : [rowId, hash],
  );
}

/** How many records of a batch are in each status. */
export async function batchStatusCounts(db: Queryable, batchId: number): Promise<(status: string) => number> {
  const counts = await db.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM usage_records WHERE batch_id = $1 GROUP BY status`,
    [batchId],
  );
  return (status: string) => Number(counts.find((c) => c.status === status)?.n ?? 0);
}

/** The scope's batches not yet final, oldest first, with how long each has been idle. */
export function openUsageBatches(db: Queryable, scope: UsageBatchScope): Promise<OpenUsageBatch[]> {
  return db.query<OpenUsageBatch>(
    `SELECT id, outbox_id, raw_tx, floor(extract(epoch FROM now() - updated_at) * 1000)::bigint AS idle_ms
       FROM usage_batches WHERE chain_id = $1 AND manager = $2 AND sender = $3
         AND status IN ('pending', 'submitted') ORDER BY id`,
    [scope.chainId, scope.manager, scope.sender],
  );
}

/** A batch, read in full. */
export function findUsageBatch(db: Queryable, batchId: number): Promise<UsageBatchRow | undefined> {
  return queryOneParsed(db, UsageBatchRowSchema, "SELECT * FROM usage_batches WHERE id = $1", [batchId]);
}

/**
 * Releases a claimed batch that was never queued: its records go back to the queue, only while it is
 * still unqueued (the compare-and-set its queueing also makes).
 */
export function releaseUnqueuedBatch(store: Pick<Store, "transaction">, batchId: number): Promise<void> {
  return store.transaction(async (tx) => {
    const released = await tx.query(
      `UPDATE usage_batches SET status = 'failed', updated_at = now()
           WHERE id = $1 AND status = 'pending' AND outbox_id IS NULL AND raw_tx IS NULL RETURNING id`,
      [batchId],
    );
    if (released.length === 0) return;
    await tx.query(
      `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
           WHERE batch_id = $1 AND status = 'submitted'`,
      [batchId],
    );
  });
}
