/**
 * Moves a gate's metered charges from its usage ledger to the facilitator (`POST /usage`) in batches:
 * on a timer, when asked (`flush()`), and when unsettled usage reaches the gate's bound.
 *
 * Invariants:
 * - Flushes never overlap within a process; instances sharing a ledger split the work (the ledger
 *   hands each pending charge to one batch).
 * - A batch whose send failed stays claimed and is sent again, with the same refs, once it is stale
 *   (`staleMs`), so the facilitator — idempotent on ref — records each charge once, whichever instance
 *   or attempt gets through.
 * - Charges stay counted as unsettled until the facilitator reports them settled or failed
 *   (`allowance.deducted` / `allowance.exhausted` events, or reconciliation), so the gate's exposure
 *   is never understated.
 */

import type { GateLogger } from "../../../../gate/gateLogger.ts";
import type { FacilitatorClient } from "../../../../http/facilitatorClient.ts";
import type { UsageRecordStatus } from "../../../../protocol/subscriptions.ts";
import { getUsageRecords, postUsage } from "./postUsage.ts";
import type { UsageLedger, UsageOutcome } from "./usageLedger.ts";

export type UsageFlusher = {
  /** Sends every pending charge; resolves with the number of batch items sent. Failures are logged. */
  flush(): Promise<number>;
  /**
   * Asks the facilitator (`GET /usage?refs=`) how charges sent more than `reconcileAfterMs` ago ended,
   * for outcomes no event reported (a deduction refused for a paused subscription, a failed pull).
   */
  reconcile(): Promise<number>;
  /** Starts the timer (idempotent; unref'd, so it never keeps a process alive). */
  start(): void;
  /** Stops the timer, then sends what is pending one last time. */
  stop(): Promise<void>;
};

export type UsageFlusherOptions = {
  ledger: UsageLedger;
  facilitator: Pick<FacilitatorClient, "request">;
  apiKey: string;
  intervalMs: number;
  /** Subscriptions per batch (one record each). */
  batchSize?: number | undefined;
  /** A claimed batch not marked sent after this long is sent again (default 30 000 ms). */
  staleMs?: number | undefined;
  /** Charges sent this long ago without an outcome are looked up (default 60 000 ms). */
  reconcileAfterMs?: number | undefined;
  logger?: GateLogger | undefined;
};

/** Batches one flush sends at most, so a flush ends even while requests keep adding charges. */
const MAX_BATCHES_PER_FLUSH = 20;
/** What a flusher sends with, and how. */
type FlushDeps = {
  ledger: UsageLedger;
  facilitator: Pick<FacilitatorClient, "request">;
  apiKey: string;
  batchSize: number;
  staleMs: number;
  reconcileAfterMs: number;
  logger: GateLogger | undefined;
};

export function createUsageFlusher(options: UsageFlusherOptions): UsageFlusher {
  const { intervalMs } = options;
  const deps: FlushDeps = {
    ledger: options.ledger,
    facilitator: options.facilitator,
    apiKey: options.apiKey,
    batchSize: options.batchSize ?? 200,
    staleMs: options.staleMs ?? 30_000,
    reconcileAfterMs: options.reconcileAfterMs ?? 60_000,
    logger: options.logger,
  };
  /** Whether the last flush failed: a failure is logged once, and the recovery too. */
  const health = { failing: false };
  let flushing: Promise<number> | undefined;
  let queued: Promise<number> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;

  const flush = (): Promise<number> => {
    // A call made during a flush gets one more flush after it, so charges made before the call go out.
    if (flushing !== undefined) {
      queued ??= flushing.then(() => {
        queued = undefined;
        return flush();
      });
      return queued;
    }
    flushing = sendPending(deps, health).finally(() => {
      flushing = undefined;
    });
    return flushing;
  };

  let reconciling: Promise<number> | undefined;
  const reconcile = (): Promise<number> => {
    reconciling ??= reconcileOutcomes(deps).finally(() => {
      reconciling = undefined;
    });
    return reconciling;
  };

  const schedule = () => {
    if (!running) return;
    timer = setTimeout(() => {
      void flush().then(reconcile).finally(schedule);
    }, intervalMs);
    timer.unref?.();
  };

  return {
    flush,
    reconcile,
    start() {
      if (running || intervalMs <= 0) return;
      running = true;
      schedule();
    },
    async stop() {
      running = false;
      if (timer !== undefined) clearTimeout(timer);
      await flush();
    },
  };
}

const outcomeOf = (status: UsageRecordStatus): UsageOutcome["outcome"] | undefined =>
  status === "settled" ? "settled" : status === "failed" ? "failed" : undefined;

/** Sends pending charges, batch by batch (at most `MAX_BATCHES_PER_FLUSH`); answers the items sent. */
async function sendPending(deps: FlushDeps, health: { failing: boolean }): Promise<number> {
  const { ledger, facilitator, apiKey, logger } = deps;
  let sent = 0;
  try {
    for (let i = 0; i < MAX_BATCHES_PER_FLUSH; i++) {
      const batch = await ledger.claimBatch({ maxItems: deps.batchSize, staleMs: deps.staleMs });
      if (batch === undefined) break;
      const accepted = await postUsage(facilitator, { apiKey, records: batch.items });
      await ledger.markBatchSent(batch.id);
      // A batch sent again may find its records already settled (or failed) on chain.
      const done = accepted.flatMap((record) => {
        const outcome = outcomeOf(record.status);
        return outcome === undefined ? [] : [{ ref: record.ref, outcome }];
      });
      if (done.length > 0) await ledger.resolve(done);
      sent += batch.items.length;
    }
    if (health.failing) logger?.warn({}, "metered usage reaches the facilitator again");
    health.failing = false;
  } catch (error) {
    if (!health.failing) {
      logger?.error({ err: error }, "metered usage could not be sent to the facilitator; it will be resent");
    }
    health.failing = true;
  }
  return sent;
}

/** Resolves charges sent `reconcileAfterMs` ago with the outcomes the facilitator reports for them. */
async function reconcileOutcomes(deps: FlushDeps): Promise<number> {
  const { ledger, logger } = deps;
  try {
    const open = await ledger.unresolved({ olderThanMs: deps.reconcileAfterMs, limit: 500 });
    if (open.length === 0) return 0;
    const records = await getUsageRecords(deps.facilitator, {
      apiKey: deps.apiKey,
      refs: open.map((item) => item.ref),
    });
    const done = records.flatMap((record) => {
      const outcome = outcomeOf(record.status);
      if (outcome === "failed") {
        logger?.warn({ ref: record.ref, failure: record.failure }, "a metered charge failed on chain");
      }
      return outcome === undefined ? [] : [{ ref: record.ref, outcome }];
    });
    return done.length === 0 ? 0 : await ledger.resolve(done);
  } catch (error) {
    logger?.warn({ err: error }, "metered usage outcomes could not be read from the facilitator");
    return 0;
  }
}
