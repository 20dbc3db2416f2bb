/**
 * The webhook outbox worker (docs/webhooks.md). Two steps, each safe to run on several facilitator
 * instances sharing one database:
 *
 * 1. Fan-out: read new rows of the `events` log past a cursor kept in the store and create one
 *    delivery per matching endpoint of the provider the event concerns (`data.provider`, else
 *    `data.payTo`; every provider's for the token's own events, `token.paused`/`token.unpaused`), in
 *    the same transaction that moves the cursor. A crash before commit changes
 *    nothing; after commit the cursor is past those events. So a restart neither skips an event nor
 *    enqueues one twice.
 * 2. Delivery: claim due deliveries (`FOR UPDATE SKIP LOCKED`) under a lease, POST each signed event,
 *    and record the outcome. A 2xx is success; anything else, a timeout or a refused connection is a
 *    failure, retried with exponential backoff and jitter until the delivery becomes a dead letter. A
 *    worker that dies mid-send leaves a lease that expires, and another worker sends again: at least
 *    once, never silently dropped. Receivers de-duplicate on the event id.
 *
 * No endpoints: a facilitator where no provider registered an endpoint (most of them, and every bench)
 * would otherwise run a round of five or six statements for every new event. While the store holds no
 * endpoint (read at most every `ENDPOINTS_RECHECK_MS`), new events do not wake the worker; its backstop
 * round still moves the cursor, and a registration anywhere wakes it at once (migration 0185). The
 * check only decides when rounds run, never what a round does: fan-out reads the endpoints in its own
 * transaction, so an event that happened after an endpoint was registered is delivered to it whatever
 * the check last said.
 *
 * Every attempt first checks its target again (webhookTargets.ts: DNS may have changed since the
 * endpoint was registered) and connects to the checked address only. An attempt records its status
 * code and a bounded, sanitised status line, never the response body (SSRF: whatever answered may be
 * an internal service whose reply the provider must not read).
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { z } from "zod";
import type { WebhookTargetPolicy } from "../../http/webhookTargets.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import {
  TokenWebhookEventTypes,
  WEBHOOK_SIGNATURE_HEADER,
  type WebhookEvent,
  WebhookEventTypeSchema,
} from "../../protocol/webhook.ts";
import { claimRows } from "../../store/claimRows.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../wakeablePause.ts";
import { webhookEventId } from "./createWebhookRepository.ts";
import { sanitizeStatusText, type WebhookFetch } from "./pinnedWebhookFetch.ts";
import { signWebhookPayload } from "./signWebhookPayload.ts";
import {
  assertWebhookRetryPolicy,
  defaultWebhookRetryPolicy,
  type WebhookRetryPolicy,
  webhookBackoff,
} from "./webhookBackoff.ts";
import type { WebhookSecretBox } from "./webhookSecretBox.ts";

export type { WebhookFetch } from "./pinnedWebhookFetch.ts";

export type WebhookDeliveryOutcome = "delivered" | "retry" | "dead";

export type WebhookWorkerOptions = {
  store: Store;
  clock: Clock;
  logger: Logger;
  /**
   * Sends a delivery to the target `targets` checked (`pinnedWebhookFetch` in production); it must
   * connect to `target.address`, not resolve the name again.
   */
  fetch: WebhookFetch;
  /** Where deliveries may go; every attempt is checked again (DNS may have changed since registration). */
  targets: WebhookTargetPolicy;
  /** Opens the endpoints' sealed secrets to sign with. */
  secrets: WebhookSecretBox;
  /** A number in [0, 1) for backoff jitter, like `Math.random`. */
  random: () => number;
  retry?: Partial<WebhookRetryPolicy> | undefined;
  /** Abort a delivery whose response has not fully arrived after this long (default 10 000 ms). */
  timeoutMs?: number | undefined;
  /** How long a claimed delivery is this worker's before another may take it over (default timeout + 30 s). */
  leaseMs?: number | undefined;
  /** Deliveries in flight at once (default 16). */
  concurrency?: number | undefined;
  /** Events read from the log per fan-out transaction (default 500). */
  fanOutBatchSize?: number | undefined;
  /**
   * Longest pause between rounds when there is nothing to do (default 30 s). A new event wakes the
   * worker at once (the store's `events` notification, from any instance); while deliveries wait for a
   * retry or a lease, the worker looks every second at most.
   */
  pollIntervalMs?: number | undefined;
  /**
   * How long delivered and dead deliveries (with their attempts) are kept after their last attempt
   * (default 30 days). The background loop prunes older ones about once an hour.
   */
  retentionMs?: number | undefined;
  /** Called after each attempt is recorded, e.g. for metrics. */
  onAttempt?: ((outcome: WebhookDeliveryOutcome) => void) | undefined;
};

export type WebhookWorkerRound = { enqueued: number; attempted: number; delivered: number; dead: number };

export type WebhookWorker = {
  /** Moves new events of the log into the outbox; returns the number of deliveries created. */
  fanOut(): Promise<number>;
  /** Sends every delivery due now (by the clock) and waits for the outcomes. */
  deliverDue(): Promise<Omit<WebhookWorkerRound, "enqueued">>;
  /** Deletes delivered and dead deliveries older than the retention; returns how many. */
  prune(): Promise<number>;
  /** `fanOut` then `deliverDue`: one round, for tests and tools that drive the worker by hand. */
  runOnce(): Promise<WebhookWorkerRound>;
  /** Runs rounds in the background until `stop`. */
  start(): void;
  /** Stops claiming and waits for the deliveries in flight to be recorded. */
  stop(): Promise<void>;
};

const OUTBOX_CURSOR = "outbox";
const PRUNE_INTERVAL_MS = 3_600_000;
/** Characters of an attempt's error kept in the delivery history (never a response body). */
const MAX_ERROR_LENGTH = 200;

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
type SendRow = z.infer<typeof SendRowSchema>;

const knownEventTypes = [...WebhookEventTypeSchema.options];

/**
 * @example
 * const worker = createWebhookWorker({ store, clock: systemClock, logger, fetch, random: Math.random });
 * worker.start();
 * // …
 * await worker.stop();
 */
export function createWebhookWorker(options: WebhookWorkerOptions): WebhookWorker {
  const { store, clock, logger } = options;
  const retry: WebhookRetryPolicy = { ...defaultWebhookRetryPolicy, ...options.retry };
  assertWebhookRetryPolicy(retry);
  const timeoutMs = positiveInt(options.timeoutMs ?? 10_000, "timeoutMs");
  const leaseMs = positiveInt(options.leaseMs ?? timeoutMs + 30_000, "leaseMs");
  const concurrency = positiveInt(options.concurrency ?? 16, "concurrency");
  const fanOutBatchSize = positiveInt(options.fanOutBatchSize ?? 500, "fanOutBatchSize");
  const pollIntervalMs = positiveInt(options.pollIntervalMs ?? IDLE_BACKSTOP_MS, "pollIntervalMs");
  const retentionMs = positiveInt(options.retentionMs ?? 30 * 86_400_000, "retentionMs");
  const log = logger.child({ component: "webhooks" });

  async function fanOutBatch(): Promise<{ events: number; enqueued: number; heldBack?: boolean }> {
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
        [cursor.tx, cursor.event_id, fanOutBatchSize],
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

  async function fanOut(): Promise<number> {
    let enqueued = 0;
    for (;;) {
      const batch = await fanOutBatch();
      enqueued += batch.enqueued;
      if (batch.events < fanOutBatchSize) return enqueued;
    }
  }

  /** Claims up to `limit` due deliveries under a fresh lease and loads what sending them needs. */
  async function claim(limit: number): Promise<{ lease: string; rows: SendRow[] }> {
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

  async function send(row: SendRow, lease: string): Promise<WebhookDeliveryOutcome | "lost"> {
    const attemptedAt = clock.now();
    const event: WebhookEvent = {
      id: webhookEventId(row.event_id),
      type: row.event_type,
      created: Math.floor(row.event_created_at.getTime() / 1000),
      data: row.event_data,
    };
    const body = JSON.stringify(event);
    let statusCode: number | null = null;
    let error: string | null = null;
    const secrets: string[] = [];
    try {
      secrets.push(options.secrets.open(row.secret, row.endpoint_id));
    } catch (cause) {
      // No key opens it: a failed attempt (retried, so configuring the key or rotating the secret heals it).
      error = sanitizeError(cause instanceof Error ? cause.message : "cannot open the endpoint's secret");
    }
    if (row.previous_secret !== null && (row.previous_secret_expires_at?.getTime() ?? 0) > attemptedAt) {
      try {
        secrets.push(options.secrets.open(row.previous_secret, row.endpoint_id));
      } catch (cause) {
        log.warn({ err: cause, webhook: row.endpoint_id }, "cannot sign with the rotated-out webhook secret");
      }
    }
    if (error === null) {
      try {
        // Checked on every attempt, not only at registration: the name may resolve elsewhere by now.
        const target = await options.targets.check(row.url);
        const response = await options.fetch(
          row.url,
          {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "user-agent": "Tollgate-Webhooks/1",
              [WEBHOOK_SIGNATURE_HEADER]: signWebhookPayload(secrets, unixSeconds(clock), body),
            },
            body,
            // A redirect is not a delivery: the receiver must give its final URL.
            redirect: "manual",
            signal: AbortSignal.timeout(timeoutMs),
          },
          target,
        );
        statusCode = response.status;
        // Only the status line is kept: the body of whatever answered is not the provider's to read
        // (it may be an internal service's reply) and never reaches the store or the logs.
        await response.body?.cancel().catch(() => {});
        if (statusCode < 200 || statusCode > 299) {
          const reason = sanitizeStatusText(response.statusText);
          error = `HTTP ${statusCode}${reason === "" ? "" : ` ${reason}`}`;
        }
      } catch (cause) {
        error = describeFetchError(cause, timeoutMs);
      }
    }
    const delivered = error === null;
    const dead = !delivered && row.attempts >= retry.maxAttempts;
    const outcome: WebhookDeliveryOutcome = delivered ? "delivered" : dead ? "dead" : "retry";
    const next =
      delivered || dead ? attemptedAt : attemptedAt + webhookBackoff(row.attempts, retry, options.random);
    const finishedAt = clock.now();
    const recorded = await store.transaction(async (tx) => {
      const updated = await tx.query(
        `UPDATE webhook_deliveries SET status = $3, next_attempt_at = $4, lease_token = NULL,
           lease_expires_at = NULL, last_attempt_at = $5, last_status_code = $6, last_error = $7,
           delivered_at = CASE WHEN $3 = 'delivered' THEN $5::timestamptz END, updated_at = now()
         WHERE id = $1 AND lease_token = $2 RETURNING id`,
        [
          row.id,
          lease,
          outcome === "retry" ? "pending" : outcome,
          new Date(next),
          new Date(attemptedAt),
          statusCode,
          error,
        ],
      );
      // The lease was lost (it expired and another worker took the delivery, or the endpoint was
      // deleted): that worker's record stands.
      if (updated.length === 0) return false;
      await tx.query(
        `INSERT INTO webhook_attempts (delivery_id, attempted_at, status_code, error, duration_ms)
         VALUES ($1, $2, $3, $4, $5)`,
        [row.id, new Date(attemptedAt), statusCode, error, Math.max(0, Math.round(finishedAt - attemptedAt))],
      );
      return true;
    });
    if (!recorded) return "lost";
    if (outcome === "dead") {
      log.warn(
        { delivery: row.id, event: event.id, url: row.url, error },
        "webhook delivery is a dead letter",
      );
    } else if (outcome === "retry") {
      log.info(
        { delivery: row.id, event: event.id, attempt: row.attempts, error },
        "webhook delivery failed",
      );
    }
    options.onAttempt?.(outcome);
    return outcome;
  }

  async function sendSafely(row: SendRow, lease: string): Promise<WebhookDeliveryOutcome | "lost"> {
    try {
      return await send(row, lease);
    } catch (cause) {
      // A store fault while recording: the lease expires and the delivery is sent again.
      log.error({ err: cause, delivery: row.id }, "could not record a webhook attempt");
      return "lost";
    }
  }

  async function deliverDue(): Promise<Omit<WebhookWorkerRound, "enqueued">> {
    const round = { attempted: 0, delivered: 0, dead: 0 };
    for (;;) {
      const { lease, rows } = await claim(concurrency);
      if (rows.length === 0) return round;
      const outcomes = await Promise.all(rows.map((row) => sendSafely(row, lease)));
      for (const outcome of outcomes) {
        round.attempted++;
        if (outcome === "delivered") round.delivered++;
        if (outcome === "dead") round.dead++;
      }
    }
  }

  async function prune(): Promise<number> {
    // Finished deliveries only: the outbox cursor, not these rows, keeps events from being enqueued again.
    const deleted = await store.query(
      `DELETE FROM webhook_deliveries WHERE status IN ('delivered', 'dead') AND last_attempt_at < $1 RETURNING id`,
      [new Date(clock.now() - retentionMs)],
    );
    return deleted.length;
  }

  // Background loop state.
  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  const inFlight = new Set<Promise<unknown>>();
  let unlisten: (() => Promise<void>) | undefined;
  /** Set by a new-event notification: one that arrives during a round is not lost. */
  let dirty = false;
  /** Whether an endpoint existed when last read, and when (`clock.now()`); a registration clears it. */
  let endpoints: { any: boolean; readAt: number } | undefined;

  /** Whether any endpoint exists, read at most every ENDPOINTS_RECHECK_MS (see "No endpoints" above). */
  async function anyEndpoint(): Promise<boolean> {
    const now = clock.now();
    if (endpoints !== undefined && now - endpoints.readAt < ENDPOINTS_RECHECK_MS) return endpoints.any;
    const rows = await store.query("SELECT 1 FROM webhook_endpoints LIMIT 1");
    endpoints = { any: rows.length > 0, readAt: now };
    return endpoints.any;
  }

  /** How long until the next delivery comes due (a retry, a lease that expires), at most `pollIntervalMs`. */
  async function untilNextDue(): Promise<number> {
    // Two minima, each read off its partial index (webhook_deliveries_due_idx, _lease_idx): one
    // expression over both statuses read every row, delivered ones included, on every round.
    const rows = await store.query<{ pending: Date | null; sending: Date | null }>(
      `SELECT (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending') AS pending,
              (SELECT min(lease_expires_at) FROM webhook_deliveries WHERE status = 'sending') AS sending`,
    );
    const times = [rows[0]?.pending, rows[0]?.sending].flatMap((d) =>
      d == null ? [] : [new Date(d).getTime()],
    );
    if (times.length === 0) return pollIntervalMs;
    // Re-read at least every second while deliveries wait: the clock may be moved (tests), and a
    // retry is not rest.
    return Math.min(pollIntervalMs, PENDING_POLL_MS, Math.max(1, Math.min(...times) - clock.now()));
  }

  async function loop(): Promise<void> {
    let prunedAt = Number.NEGATIVE_INFINITY;
    // Doubles while the same events stay held back (a long transaction elsewhere), up to PENDING_POLL_MS.
    let heldBackMs = HELD_BACK_POLL_MS;
    while (running) {
      let busy = false;
      let heldBack = false;
      dirty = false;
      try {
        if (clock.now() - prunedAt >= PRUNE_INTERVAL_MS) {
          prunedAt = clock.now();
          const pruned = await prune();
          if (pruned > 0) log.info({ pruned }, "pruned finished webhook deliveries");
        }
        // Read here so that a round never runs on a stale "none" for longer than the recheck period.
        await anyEndpoint();
        const before = await fanOutBatch();
        busy = before.events === fanOutBatchSize;
        heldBack = before.heldBack === true;
        const free = concurrency - inFlight.size;
        if (free > 0) {
          const { lease, rows } = await claim(free);
          for (const row of rows) {
            const task = sendSafely(row, lease).finally(() => {
              inFlight.delete(task);
              // A slot is free: look for more work now rather than after the poll interval.
              sleeper.wake();
            });
            inFlight.add(task);
          }
          if (rows.length === free) busy = true;
        }
      } catch (cause) {
        log.error({ err: cause }, "webhook worker round failed");
      }
      if (running && !busy) {
        const ms = await untilNextDue().catch(() => pollIntervalMs);
        if (!heldBack) heldBackMs = HELD_BACK_POLL_MS;
        if (!dirty) await sleeper.pause(heldBack ? Math.min(ms, heldBackMs) : ms);
        if (heldBack) heldBackMs = Math.min(heldBackMs * 2, PENDING_POLL_MS);
      } else if (running && inFlight.size >= concurrency) await sleeper.pause(pollIntervalMs);
    }
    await Promise.allSettled([...inFlight]);
  }

  return {
    fanOut,
    deliverDue,
    prune,
    async runOnce() {
      const enqueued = await fanOut();
      return { enqueued, ...(await deliverDue()) };
    },
    start() {
      if (running) return;
      running = true;
      loopDone = (async () => {
        const wake = () => {
          dirty = true;
          sleeper.wake();
        };
        // New events to fan out (only worth a round once some endpoint exists), and deliveries queued
        // or rescheduled or an endpoint registered.
        const onEvents = () => {
          if (endpoints?.any !== false) wake();
        };
        const onWebhooks = () => {
          // Deliveries notify here too: only "none" needs reading again at once (a first endpoint).
          if (endpoints?.any === false) endpoints = undefined;
          wake();
        };
        const stops = await Promise.all(
          (
            [
              ["events", onEvents],
              ["webhooks", onWebhooks],
            ] as const
          ).map(([name, fn]) =>
            store.listen(name, fn).catch((error: unknown) => {
              log.warn({ err: error }, "cannot listen for webhook work; the worker looks on its own");
              return undefined;
            }),
          ),
        );
        unlisten = async () => {
          for (const stop of stops) await stop?.();
        };
        await loop();
      })();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      loopDone = undefined;
      await unlisten?.();
      unlisten = undefined;
    },
  };
}

/** The longest pause while deliveries wait for their retry or lease. */
const PENDING_POLL_MS = 1_000;
/** How long "no endpoint exists" (or "some does") is trusted before the worker reads it again. */
const ENDPOINTS_RECHECK_MS = 10_000;
/** How soon to look first again at events a running transaction held back from the fan-out. */
const HELD_BACK_POLL_MS = 100;

function positiveInt(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new TypeError(`webhook ${name} must be a positive integer`);
  return value;
}

function describeFetchError(cause: unknown, timeoutMs: number): string {
  if (cause instanceof Error && (cause.name === "TimeoutError" || cause.name === "AbortError")) {
    return `no response within ${timeoutMs} ms`;
  }
  if (cause instanceof TollgateError) {
    const reason = (cause.details as { reason?: unknown } | undefined)?.reason;
    return sanitizeError(`refused: ${typeof reason === "string" ? `${reason}: ` : ""}${cause.message}`);
  }
  if (cause instanceof Error) {
    const own = cause as { code?: unknown };
    const inner = cause.cause as { code?: unknown; message?: unknown } | undefined;
    const code = typeof own.code === "string" ? own.code : typeof inner?.code === "string" ? inner.code : "";
    return sanitizeError(code === "" ? cause.message : `${cause.message}: ${code}`);
  }
  return "request failed";
}

/** What an attempt's `error` may hold: one line of printable ASCII, bounded. */
function sanitizeError(text: string): string {
  return text
    .replace(/[^\x20-\x7e]+/g, " ")
    .trim()
    .slice(0, MAX_ERROR_LENGTH);
}
