/**
 * The flush side of the PostgreSQL usage ledger: claiming pending charges into a batch for the
 * facilitator, marking it sent, resolving its items' outcomes and listing those still unresolved.
 * Claiming skips locked rows instead of waiting (`FOR UPDATE SKIP LOCKED`), so a flush never blocks
 * requests and instances flushing together split the work.
 */
import type { Clock } from "../../../../protocol/clock.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import { queryOneParsed, queryParsed } from "../../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../../store/store.ts";
import {
  CountRowSchema,
  ItemRowSchema,
  itemOf,
  PendingRowSchema,
  SerialRowSchema,
} from "./postgresUsageRows.ts";
import { type UsageBatch, type UsageBatchItem, type UsageOutcome, usageRef } from "./usageLedger.ts";

/** One ledger in a store: its `name`, its random `ledgerId` (in every item's ref) and the clock. */
export type PostgresLedgerScope = { store: Store; name: string; ledgerId: string; clock: Clock };

/**
 * Puts every pending charge into a new batch (at most `maxItems` subscriptions), or hands back a batch
 * claimed earlier and not marked sent within `staleMs`, claimed again.
 */
export function claimPostgresUsageBatch(
  ledger: PostgresLedgerScope,
  { maxItems, staleMs }: { maxItems: number; staleMs: number },
): Promise<UsageBatch | undefined> {
  const { name } = ledger;
  const now = ledger.clock.now();
  return ledger.store.transaction(async (tx) => {
    const stale = await queryOneParsed(
      tx,
      SerialRowSchema,
      `SELECT id FROM gate_usage_batches
           WHERE ledger = $1 AND status = 'claimed' AND claimed_at_ms <= $2
           ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`,
      [name, now - staleMs],
    );
    if (stale !== undefined) {
      await tx.query("UPDATE gate_usage_batches SET claimed_at_ms = $2 WHERE id = $1", [stale.id, now]);
      const items = await queryParsed(
        tx,
        ItemRowSchema,
        "SELECT ref, subscription_id, amount FROM gate_usage_items WHERE batch_id = $1 ORDER BY ref",
        [stale.id],
      );
      return { id: String(stale.id), items: items.map(itemOf) };
    }
    return claimPending(tx, ledger, maxItems, now);
  });
}

/** Claims up to `maxItems` cycles' pending charges into a new batch of items, each with its ref. */
async function claimPending(
  tx: Queryable,
  { name, ledgerId }: PostgresLedgerScope,
  maxItems: number,
  now: number,
): Promise<UsageBatch | undefined> {
  const picked = await queryParsed(
    tx,
    PendingRowSchema,
    `SELECT subscription_id, pending FROM gate_usage_cycles
           WHERE ledger = $1 AND pending > 0
           ORDER BY subscription_id LIMIT $2 FOR UPDATE SKIP LOCKED`,
    [name, maxItems],
  );
  if (picked.length === 0) return undefined;
  const batch = await queryOneParsed(
    tx,
    SerialRowSchema,
    "INSERT INTO gate_usage_batches (ledger, claimed_at_ms) VALUES ($1, $2) RETURNING id",
    [name, now],
  );
  if (batch === undefined) throw new TollgateError("Internal", "usage batch insert returned no row");
  const id = String(batch.id);
  const items: UsageBatchItem[] = picked.map((row) => ({
    ref: usageRef(ledgerId, id, row.subscription_id),
    subscriptionId: row.subscription_id,
    amount: row.pending,
  }));
  await tx.query(
    `UPDATE gate_usage_cycles SET pending = 0, updated_at = now()
           WHERE ledger = $1 AND subscription_id = ANY($2::numeric[])`,
    [name, items.map((item) => item.subscriptionId.toString())],
  );
  await tx.query(
    `INSERT INTO gate_usage_items (ref, ledger, batch_id, subscription_id, amount)
           SELECT unnest($3::text[]), $1, $2, unnest($4::numeric[]), unnest($5::numeric[])`,
    [
      name,
      batch.id,
      items.map((item) => item.ref),
      items.map((item) => item.subscriptionId.toString()),
      items.map((item) => item.amount.toString()),
    ],
  );
  return { id, items };
}

/** Marks a claimed batch and its claimed items sent. */
export async function markPostgresBatchSent(
  { store, name, clock }: PostgresLedgerScope,
  batchId: string,
): Promise<void> {
  const now = clock.now();
  await store.transaction(async (tx) => {
    const rows = await tx.query(
      "UPDATE gate_usage_batches SET status = 'sent' WHERE id = $1 AND ledger = $2 AND status = 'claimed' RETURNING id",
      [batchId, name],
    );
    if (rows.length === 0) return;
    await tx.query(
      "UPDATE gate_usage_items SET status = 'sent', sent_at_ms = $2 WHERE batch_id = $1 AND status = 'claimed'",
      [batchId, now],
    );
  });
}

/** Records items' outcomes; answers how many were resolved now (not before). */
export async function resolvePostgresUsage(
  { store, name }: PostgresLedgerScope,
  outcomes: readonly UsageOutcome[],
): Promise<number> {
  if (outcomes.length === 0) return 0;
  // One statement: the items resolved now (not before) are subtracted from the exposure, once.
  const rows = await queryParsed(
    store,
    CountRowSchema,
    `WITH outcome AS (
           SELECT unnest($2::text[]) AS ref, unnest($3::text[]) AS status
         ), done AS (
           UPDATE gate_usage_items i SET status = o.status, resolved_at = now()
           FROM outcome o
           WHERE i.ref = o.ref AND i.ledger = $1 AND i.status IN ('claimed', 'sent')
           RETURNING i.amount
         ), lowered AS (
           UPDATE gate_usage_ledgers SET unsettled = unsettled - (SELECT coalesce(sum(amount), 0) FROM done)
           WHERE name = $1 RETURNING 1
         )
         SELECT count(*) AS n FROM done`,
    [name, outcomes.map((o) => o.ref), outcomes.map((o) => o.outcome)],
  );
  return rows[0]?.n ?? 0;
}

/** Items sent at least `olderThanMs` ago and not yet resolved, oldest first. */
export async function unresolvedPostgresUsage(
  { store, name, clock }: PostgresLedgerScope,
  { olderThanMs, limit }: { olderThanMs: number; limit: number },
): Promise<UsageBatchItem[]> {
  const rows = await queryParsed(
    store,
    ItemRowSchema,
    `SELECT ref, subscription_id, amount FROM gate_usage_items
         WHERE ledger = $1 AND status = 'sent' AND sent_at_ms <= $2
         ORDER BY sent_at_ms, ref LIMIT $3`,
    [name, clock.now() - olderThanMs, limit],
  );
  return rows.map(itemOf);
}
