/**
 * The webhook worker's background loop (createWebhookWorker.ts). Each round prunes (about hourly),
 * fans out one batch of events and claims due deliveries into the free sending slots; the sends run on
 * in the background. Between rounds the loop pauses until the next delivery is due, cut short by a new
 * event (only while some endpoint may exist), a registration, a delivery queued, or a freed slot.
 */
import { createWakeablePause, type WakeablePause } from "../wakeablePause.ts";
import { sendWebhookDeliverySafely, type WebhookSender } from "./sendWebhookDelivery.ts";
import {
  anyWebhookEndpointStored,
  claimDueWebhookDeliveries,
  fanOutWebhookEvents,
  nextWebhookDueTimes,
  pruneFinishedWebhookDeliveries,
} from "./webhookOutboxRecords.ts";

/** The worker's effects and its settings, checked once by createWebhookWorker. */
export type WebhookWorkerSettings = WebhookSender & {
  leaseMs: number;
  concurrency: number;
  fanOutBatchSize: number;
  pollIntervalMs: number;
  retentionMs: number;
};

/** The background loop's state, shared by its rounds, its sends in flight and the store's notifications. */
export type WebhookWorkerLoop = {
  running: boolean;
  done: Promise<void> | undefined;
  sleeper: WakeablePause;
  inFlight: Set<Promise<unknown>>;
  unlisten: (() => Promise<void>) | undefined;
  /** Set by a new-event notification: one that arrives during a round is not lost. */
  dirty: boolean;
  /** Whether an endpoint existed when last read, and when (`clock.now()`); a registration clears it. */
  endpoints: { any: boolean; readAt: number } | undefined;
};

/** What the loop keeps from one round to the next; fresh on every start. */
type RoundTimers = {
  prunedAt: number;
  /** Doubles while the same events stay held back (a long transaction elsewhere), up to PENDING_POLL_MS. */
  heldBackMs: number;
};

/** What a round learnt: more work is waiting at once, or a running transaction holds events back. */
type RoundResult = { busy: boolean; heldBack: boolean };

const PRUNE_INTERVAL_MS = 3_600_000;
/** The longest pause while deliveries wait for their retry or lease. */
const PENDING_POLL_MS = 1_000;
/** How long "no endpoint exists" (or "some does") is trusted before the worker reads it again. */
const ENDPOINTS_RECHECK_MS = 10_000;
/** How soon to look first again at events a running transaction held back from the fan-out. */
const HELD_BACK_POLL_MS = 100;

export function createWebhookWorkerLoop(): WebhookWorkerLoop {
  return {
    running: false,
    done: undefined,
    sleeper: createWakeablePause(),
    inFlight: new Set(),
    unlisten: undefined,
    dirty: false,
    endpoints: undefined,
  };
}

/** Listens for work and runs rounds until `stopWebhookWorkerLoop`; a second start is a no-op. */
export function startWebhookWorkerLoop(w: WebhookWorkerSettings, loop: WebhookWorkerLoop): void {
  if (loop.running) return;
  loop.running = true;
  loop.done = (async () => {
    loop.unlisten = await listenForWork(w, loop);
    await runRounds(w, loop);
  })();
}

/** Stops claiming, waits for the deliveries in flight to be recorded, and stops listening. */
export async function stopWebhookWorkerLoop(loop: WebhookWorkerLoop): Promise<void> {
  loop.running = false;
  loop.sleeper.wake();
  await loop.done;
  loop.done = undefined;
  await loop.unlisten?.();
  loop.unlisten = undefined;
}

/** Deletes delivered and dead deliveries older than the retention; returns how many. */
export function pruneWebhookDeliveries(w: WebhookWorkerSettings): Promise<number> {
  return pruneFinishedWebhookDeliveries(w.store, new Date(w.clock.now() - w.retentionMs));
}

/**
 * Subscribes to new events (only worth a round once some endpoint exists) and to the webhooks channel
 * (deliveries queued or rescheduled, an endpoint registered). Returns what unsubscribes both.
 */
async function listenForWork(
  w: WebhookWorkerSettings,
  loop: WebhookWorkerLoop,
): Promise<() => Promise<void>> {
  const wake = () => {
    loop.dirty = true;
    loop.sleeper.wake();
  };
  const onEvents = () => {
    if (loop.endpoints?.any !== false) wake();
  };
  const onWebhooks = () => {
    // Deliveries notify here too: only "none" needs reading again at once (a first endpoint).
    if (loop.endpoints?.any === false) loop.endpoints = undefined;
    wake();
  };
  const stops = await Promise.all(
    (
      [
        ["events", onEvents],
        ["webhooks", onWebhooks],
      ] as const
    ).map(([name, fn]) =>
      w.store.listen(name, fn).catch((error: unknown) => {
        w.log.warn({ err: error }, "cannot listen for webhook work; the worker looks on its own");
        return undefined;
      }),
    ),
  );
  return async () => {
    for (const stop of stops) await stop?.();
  };
}

async function runRounds(w: WebhookWorkerSettings, loop: WebhookWorkerLoop): Promise<void> {
  const timers: RoundTimers = { prunedAt: Number.NEGATIVE_INFINITY, heldBackMs: HELD_BACK_POLL_MS };
  while (loop.running) {
    const round: RoundResult = { busy: false, heldBack: false };
    loop.dirty = false;
    try {
      await runRound(w, loop, timers, round);
    } catch (cause) {
      w.log.error({ err: cause }, "webhook worker round failed");
    }
    await pauseAfterRound(w, loop, timers, round);
  }
  await Promise.allSettled([...loop.inFlight]);
}

/** One round. It fills `round` as it goes, so a fault part way keeps what the round learnt before it. */
async function runRound(
  w: WebhookWorkerSettings,
  loop: WebhookWorkerLoop,
  timers: RoundTimers,
  round: RoundResult,
): Promise<void> {
  if (w.clock.now() - timers.prunedAt >= PRUNE_INTERVAL_MS) {
    timers.prunedAt = w.clock.now();
    const pruned = await pruneWebhookDeliveries(w);
    if (pruned > 0) w.log.info({ pruned }, "pruned finished webhook deliveries");
  }
  // Read here so that a round never runs on a stale "none" for longer than the recheck period.
  await anyEndpoint(w, loop);
  const batch = await fanOutWebhookEvents(w.store, w.clock, w.fanOutBatchSize);
  round.busy = batch.events === w.fanOutBatchSize;
  round.heldBack = batch.heldBack === true;
  if (await sendIntoFreeSlots(w, loop)) round.busy = true;
}

/** Claims a due delivery for every free slot and sends them in the background; true if all slots filled. */
async function sendIntoFreeSlots(w: WebhookWorkerSettings, loop: WebhookWorkerLoop): Promise<boolean> {
  const free = w.concurrency - loop.inFlight.size;
  if (free <= 0) return false;
  const { lease, rows } = await claimDueWebhookDeliveries(w.store, w.clock, w.leaseMs, free);
  for (const row of rows) {
    const task = sendWebhookDeliverySafely(w, row, lease).finally(() => {
      loop.inFlight.delete(task);
      // A slot is free: look for more work now rather than after the poll interval.
      loop.sleeper.wake();
    });
    loop.inFlight.add(task);
  }
  return rows.length === free;
}

/**
 * Pauses unless more work is waiting: until the next delivery comes due, briefly (and then less
 * briefly) while events are held back, and not at all when a notification came during the round.
 */
async function pauseAfterRound(
  w: WebhookWorkerSettings,
  loop: WebhookWorkerLoop,
  timers: RoundTimers,
  round: RoundResult,
): Promise<void> {
  if (loop.running && !round.busy) {
    const ms = await untilNextDue(w).catch(() => w.pollIntervalMs);
    if (!round.heldBack) timers.heldBackMs = HELD_BACK_POLL_MS;
    if (!loop.dirty) await loop.sleeper.pause(round.heldBack ? Math.min(ms, timers.heldBackMs) : ms);
    if (round.heldBack) timers.heldBackMs = Math.min(timers.heldBackMs * 2, PENDING_POLL_MS);
  } else if (loop.running && loop.inFlight.size >= w.concurrency) await loop.sleeper.pause(w.pollIntervalMs);
}

/** Whether any endpoint exists, read at most every ENDPOINTS_RECHECK_MS (createWebhookWorker.ts, "No endpoints"). */
async function anyEndpoint(w: WebhookWorkerSettings, loop: WebhookWorkerLoop): Promise<boolean> {
  const now = w.clock.now();
  if (loop.endpoints !== undefined && now - loop.endpoints.readAt < ENDPOINTS_RECHECK_MS)
    return loop.endpoints.any;
  const any = await anyWebhookEndpointStored(w.store);
  loop.endpoints = { any, readAt: now };
  return any;
}

/** How long until the next delivery comes due (a retry, a lease that expires), at most `pollIntervalMs`. */
async function untilNextDue(w: WebhookWorkerSettings): Promise<number> {
  const times = await nextWebhookDueTimes(w.store);
  if (times.length === 0) return w.pollIntervalMs;
  // Re-read at least every second while deliveries wait: the clock may be moved (tests), and a
  // retry is not rest.
  return Math.min(w.pollIntervalMs, PENDING_POLL_MS, Math.max(1, Math.min(...times) - w.clock.now()));
}
