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
import type { Logger } from "pino";
import type { WebhookTargetPolicy } from "../../http/webhookTargets.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import { IDLE_BACKSTOP_MS } from "../wakeablePause.ts";
import type { WebhookFetch } from "./pinnedWebhookFetch.ts";
import type { WebhookDeliveryOutcome } from "./sendWebhookDelivery.ts";
import { sendWebhookDeliverySafely } from "./sendWebhookDelivery.ts";
import {
  assertWebhookRetryPolicy,
  defaultWebhookRetryPolicy,
  type WebhookRetryPolicy,
} from "./webhookBackoff.ts";
import { claimDueWebhookDeliveries, fanOutWebhookEvents } from "./webhookOutboxRecords.ts";
import type { WebhookSecretBox } from "./webhookSecretBox.ts";
import {
  createWebhookWorkerLoop,
  pruneWebhookDeliveries,
  startWebhookWorkerLoop,
  stopWebhookWorkerLoop,
  type WebhookWorkerSettings,
} from "./webhookWorkerLoop.ts";

export type { WebhookFetch } from "./pinnedWebhookFetch.ts";
export type { WebhookDeliveryOutcome } from "./sendWebhookDelivery.ts";

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

/**
 * @example
 * const worker = createWebhookWorker({ store, clock: systemClock, logger, fetch, random: Math.random });
 * worker.start();
 * // …
 * await worker.stop();
 */
export function createWebhookWorker(options: WebhookWorkerOptions): WebhookWorker {
  const w = webhookWorkerSettings(options);
  const loop = createWebhookWorkerLoop();
  const fanOut = () => fanOutAll(w);
  const deliverDue = () => deliverAllDue(w);
  return {
    fanOut,
    deliverDue,
    prune: () => pruneWebhookDeliveries(w),
    async runOnce() {
      const enqueued = await fanOut();
      return { enqueued, ...(await deliverDue()) };
    },
    start: () => startWebhookWorkerLoop(w, loop),
    stop: () => stopWebhookWorkerLoop(loop),
  };
}

/** The options with their defaults, checked once: a bad setting fails here, not in a round. */
function webhookWorkerSettings(options: WebhookWorkerOptions): WebhookWorkerSettings {
  const retry: WebhookRetryPolicy = { ...defaultWebhookRetryPolicy, ...options.retry };
  assertWebhookRetryPolicy(retry);
  const timeoutMs = positiveInt(options.timeoutMs ?? 10_000, "timeoutMs");
  return {
    store: options.store,
    clock: options.clock,
    log: options.logger.child({ component: "webhooks" }),
    fetch: options.fetch,
    targets: options.targets,
    secrets: options.secrets,
    random: options.random,
    retry,
    timeoutMs,
    onAttempt: options.onAttempt,
    leaseMs: positiveInt(options.leaseMs ?? timeoutMs + 30_000, "leaseMs"),
    concurrency: positiveInt(options.concurrency ?? 16, "concurrency"),
    fanOutBatchSize: positiveInt(options.fanOutBatchSize ?? 500, "fanOutBatchSize"),
    pollIntervalMs: positiveInt(options.pollIntervalMs ?? IDLE_BACKSTOP_MS, "pollIntervalMs"),
    retentionMs: positiveInt(options.retentionMs ?? 30 * 86_400_000, "retentionMs"),
  };
}

/** Fan-out batches until one comes back short; returns the deliveries created. */
async function fanOutAll(w: WebhookWorkerSettings): Promise<number> {
  let enqueued = 0;
  for (;;) {
    const batch = await fanOutWebhookEvents(w.store, w.clock, w.fanOutBatchSize);
    enqueued += batch.enqueued;
    if (batch.events < w.fanOutBatchSize) return enqueued;
  }
}

/** Claims and sends due deliveries, `concurrency` at a time, until none is due. */
async function deliverAllDue(w: WebhookWorkerSettings): Promise<Omit<WebhookWorkerRound, "enqueued">> {
  const round = { attempted: 0, delivered: 0, dead: 0 };
  for (;;) {
    const { lease, rows } = await claimDueWebhookDeliveries(w.store, w.clock, w.leaseMs, w.concurrency);
    if (rows.length === 0) return round;
    const outcomes = await Promise.all(rows.map((row) => sendWebhookDeliverySafely(w, row, lease)));
    for (const outcome of outcomes) {
      round.attempted++;
      if (outcome === "delivered") round.delivered++;
      if (outcome === "dead") round.dead++;
    }
  }
}

function positiveInt(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new TypeError(`webhook ${name} must be a positive integer`);
  return value;
}
