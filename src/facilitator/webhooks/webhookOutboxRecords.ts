/**
 * The webhook outbox worker's statements (createWebhookWorker.ts): the fan-out of the event log into
 * deliveries, the claim of due deliveries under a lease, the record of an attempt, pruning, and the two
 * reads that decide when the next round runs.
 */
import { randomUUID } from "node:crypto";
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { TokenWebhookEventTypes, WebhookEventTypeSchema } from "../../protocol/webhook.ts";
import { claimRows } from "../../store/claimRows.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";

const OUTBOX_CURSOR = "outbox";

const CursorRowSchema = z.object({ tx: z.string(), event_id: SafeIntColumnSchema });
const EventRowSchema = z.object({ id: SafeIntColumnSchema, tx: z.string() });
const ClaimedRowSchema = z.object({ id: SafeIntColumnSchema });
const SendRowSchema = z.object({
  id: SafeIntColumnSchema,
  endpoint_id: z.string(),
  attempts: z.number().int(),
  event_id: SafeIntColumnSchema,
  event_type: WebhookEventTypeSchema,
  event_data: z.record(z.string(), z.unknown()),
  event_created_at: TimestampColumnSchema,
  url: z.string(),
  secret: z.string(),
  previous_secret: z.string().nullable(),
  previous_secret_expires_at: TimestampColumnSchema.nullable(),
});
/** A claimed delivery with what sending it needs: its event and its endpoint's URL and sealed secrets. */
export type WebhookSendRow = z.infer<typeof SendRowSchema>;

const knownEventTypes = [...WebhookEventTypeSchema.options];

/** One fan-out transaction: events read past the cursor, deliveries created, and whether some were held back. */
export type WebhookFanOutBatch = { events: number; enqueued: number; heldBack?: boolean };

/**
 * Reads up to `batchSize` events past the outbox cursor, creates their deliveries and moves the cursor,
 * in one transaction. Nothing (zero events) when another instance holds the cursor.
 */
export async function fanOutWebhookEvents(
  store: Store,
  clock: Clock,
  batchSize: number,
): Promise<WebhookFanOutBatch> {
  return store.transaction(async (tx) => {
    // The row lock makes instances take turns; SKIP LOCKED lets a busy instance move on.
    const cursor = await queryOneParsed(
      tx,
      CursorRowSchema,
      "SELECT tx::text AS tx, event_id FROM webhook_cursors WHERE name = $1 FOR UPDATE SKIP LOCKED",
      [OUTBOX_CURSOR],
    );
    if (cursor === undefined) return { events: 0, enqueued: 0 };
    // Only events of transactions older than every running one: that set is final (see 0020). Ordered
    // by the column (`events.tx`), not by the output's text of it, in which 1000 comes before 999.
    const events = await queryParsed(
      tx,
      EventRowSchema,
      `SELECT id, tx::text AS tx FROM events
       WHERE (tx, id) > ($1::xid8, $2::bigint) AND tx < pg_snapshot_xmin(pg_current_snapshot())
       ORDER BY events.tx, events.id LIMIT $3`,
      [cursor.tx, cursor.event_id, batchSize],
    );
    const last = events.at(-1);
    if (last === undefined) {
      // Events past the cursor that a running transaction still holds back (on PostgreSQL any
      // transaction of the database, another schema's included): their notification has come and
      // gone, so the loop must look again soon rather than sleep until the backstop.
      const held = await tx.query("SELECT 1 FROM events WHERE (tx, id) > ($1::xid8, $2::bigint) LIMIT 1", [
        cursor.tx,
        cursor.event_id,
      ]);
      return { events: 0, enqueued: 0, heldBack: held.length > 0 };
    }
    const inserted = await tx.query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, next_attempt_at)
       SELECT w.id, e.id, $3 FROM events e
       JOIN webhook_endpoints w
         ON (w.provider = lower(coalesce(e.data ->> 'provider', e.data ->> 'payTo'))
             OR e.type = ANY ($4::text[]))
        AND (w.events IS NULL OR e.type = ANY (w.events))
        AND w.created_at <= e.created_at
       WHERE e.id = ANY ($1::bigint[]) AND e.type = ANY ($2::text[])
       ORDER BY e.tx, e.id, w.id
       ON CONFLICT (endpoint_id, event_id) DO NOTHING
       RETURNING id`,
      [events.map((e) => e.id), knownEventTypes, new Date(clock.now()), [...TokenWebhookEventTypes]],
    );
    await tx.query(
      "UPDATE webhook_cursors SET tx = $2::xid8, event_id = $3, updated_at = now() WHERE name = $1",
      [OUTBOX_CURSOR, last.tx, last.id],
    );
    return { events: events.length, enqueued: inserted.length };
  });
}

/** Claims up to `limit` due deliveries under a fresh lease and loads what sending them needs. */
export async function claimDueWebhookDeliveries(
  store: Store,
  clock: Clock,
  leaseMs: number,
  limit: number,
): Promise<{ lease: string; rows: WebhookSendRow[] }> {
  const lease = randomUUID();
  const now = clock.now();
  const claimed = await claimRows(store, ClaimedRowSchema, {
    table: "webhook_deliveries",
    where:
      "(status = 'pending' AND next_attempt_at <= $1) OR (status = 'sending' AND lease_expires_at <= $1)",
    set: "status = 'sending', lease_token = $2, lease_expires_at = $3, attempts = attempts + 1, updated_at = now()",
    orderBy: "next_attempt_at, id",
    limit,
    params: [new Date(now), lease, new Date(now + leaseMs)],
  });
  if (claimed.length === 0) return { lease, rows: [] };
  const rows = await queryParsed(
    store,
    SendRowSchema,
    `SELECT d.id, d.attempts, e.id AS event_id, e.type AS event_type, e.data AS event_data,
       e.created_at AS event_created_at, d.endpoint_id, w.url, w.secret, w.previous_secret, w.previous_secret_expires_at
     FROM webhook_deliveries d
     JOIN events e ON e.id = d.event_id
     JOIN webhook_endpoints w ON w.id = d.endpoint_id
     WHERE d.id = ANY ($1::bigint[]) AND d.lease_token = $2
     ORDER BY d.next_attempt_at, d.id`,
    [claimed.map((c) => c.id), lease],
  );
  return { lease, rows };
}

/** One attempt's result, as recorded on its delivery and in the delivery's history. */
export type WebhookAttemptRecord = {
  deliveryId: number;
  lease: string;
  status: "pending" | "delivered" | "dead";
  /** When the delivery is due again (`clock.now()` time); the attempt's time once it is finished. */
  nextAttemptAt: number;
  attemptedAt: number;
  finishedAt: number;
  statusCode: number | null;
  error: string | null;
};

/**
 * Records an attempt and releases the lease. False when the lease was lost (it expired and another
 * worker took the delivery, or the endpoint was deleted): that worker's record stands.
 */
export async function recordWebhookAttempt(store: Store, attempt: WebhookAttemptRecord): Promise<boolean> {
  const { deliveryId, attemptedAt, statusCode, error } = attempt;
  return store.transaction(async (tx) => {
    const updated = await tx.query(
      `UPDATE webhook_deliveries SET status = $3, next_attempt_at = $4, lease_token = NULL,
         lease_expires_at = NULL, last_attempt_at = $5, last_status_code = $6, last_error = $7,
         delivered_at = CASE WHEN $3 = 'delivered' THEN $5::timestamptz END, updated_at = now()
       WHERE id = $1 AND lease_token = $2 RETURNING id`,
      [
        deliveryId,
        attempt.lease,
        attempt.status,
        new Date(attempt.nextAttemptAt),
        new Date(attemptedAt),
        statusCode,
        error,
      ],
    );
    if (updated.length === 0) return false;
    await tx.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, status_code, error, duration_ms)
       VALUES ($1, $2, $3, $4, $5)`,
      [
        deliveryId,
        new Date(attemptedAt),
        statusCode,
        error,
        Math.max(0, Math.round(attempt.finishedAt - attemptedAt)),
      ],
    );
    return true;
  });
}

/** Deletes delivered and dead deliveries last attempted before `before`; returns how many. */
export async function pruneFinishedWebhookDeliveries(store: Store, before: Date): Promise<number> {
  // Finished deliveries only: the outbox cursor, not these rows, keeps events from being enqueued again.
  const deleted = await store.query(
    `DELETE FROM webhook_deliveries WHERE status IN ('delivered', 'dead') AND last_attempt_at < $1 RETURNING id`,
    [before],
  );
  return deleted.length;
}

/** Whether the store holds any webhook endpoint at all. */
export async function anyWebhookEndpointStored(store: Store): Promise<boolean> {
  const rows = await store.query("SELECT 1 FROM webhook_endpoints LIMIT 1");
  return rows.length > 0;
}

/** When the next pending delivery is due and the next lease expires (`getTime()`), those that exist. */
export async function nextWebhookDueTimes(store: Store): Promise<number[]> {
  // Two minima, each read off its partial index (webhook_deliveries_due_idx, _lease_idx): one
  // expression over both statuses read every row, delivered ones included, on every round.
  const rows = await store.query<{ pending: Date | null; sending: Date | null }>(
    `SELECT (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending') AS pending,
            (SELECT min(lease_expires_at) FROM webhook_deliveries WHERE status = 'sending') AS sending`,
  );
  return [rows[0]?.pending, rows[0]?.sending].flatMap((d) => (d == null ? [] : [new Date(d).getTime()]));
}
