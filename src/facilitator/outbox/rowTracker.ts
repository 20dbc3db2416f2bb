/**
 * The rows this outbox worker drives (rowDriver.ts), one drive per row at a time. A drive that fails is
 * logged, its waiters are rejected and the worker's loop is woken to reconcile the row (here or, once
 * stale, by another instance); whether it failed for an unreachable chain feeds the lost-transaction
 * check (rewindCheck.ts).
 */
import type { Logger } from "pino";
import { isChainUnreachable } from "../chainErrors.ts";
import type { FeeHold } from "./feeHold.ts";
import type { OutboxRow } from "./outboxRecords.ts";
import type { OutboxOutcome, OutboxSigned } from "./outboxTypes.ts";
import type { RewindCheck } from "./rewindCheck.ts";
import type { WaiterMap } from "./waiterMap.ts";

export type RowTrackerDeps = {
  log: Logger;
  drive: (row: OutboxRow, fresh: boolean) => Promise<void>;
  rewind: RewindCheck;
  feeHold: FeeHold;
  outcomeWaiters: WaiterMap<OutboxOutcome>;
  hashWaiters: WaiterMap<OutboxSigned>;
  /** A row of this kind reached its outcome (the reorganisation watch looks at its kinds with a hook). */
  finished: (kind: string) => void;
  /** A drive failed: the loop reconciles at once. */
  failed: () => void;
};

export type RowTracker = {
  /** Drives the row (just signed here when `fresh`), or returns the drive already running. */
  track(row: OutboxRow, fresh: boolean): Promise<void>;
  /** The drives running, by row id. */
  readonly inFlight: ReadonlyMap<number, Promise<void>>;
};

export function createRowTracker(deps: RowTrackerDeps): RowTracker {
  const inFlight = new Map<number, Promise<void>>();
  return {
    inFlight,
    track(row, fresh) {
      const existing = inFlight.get(row.id);
      if (existing !== undefined) return existing;
      const promise = driveOnce(deps, row, fresh, () => {
        inFlight.delete(row.id);
        deps.rewind.done(row.id);
      });
      // A tracked promise is awaited by `flush`/`waitFor` when they need its error; never unhandled.
      promise.catch(() => undefined);
      inFlight.set(row.id, promise);
      deps.rewind.driving(row);
      return promise;
    },
  };
}

function driveOnce(deps: RowTrackerDeps, row: OutboxRow, fresh: boolean, forget: () => void): Promise<void> {
  const { log, rewind } = deps;
  let failed = false;
  return deps
    .drive(row, fresh)
    .then(() => {
      rewind.setChainDown(false);
      deps.finished(row.kind);
    })
    .catch((error: unknown) => {
      if (isChainUnreachable(error)) {
        if (!rewind.chainDown)
          log.warn({ id: row.id, kind: row.kind }, "chain unreachable; the transaction will be retried");
        rewind.setChainDown(true);
      } else {
        log.error({ id: row.id, kind: row.kind, err: error }, "outbox row failed; it will be reconciled");
      }
      deps.outcomeWaiters.settle(row.id, (w) => w.reject(error));
      deps.hashWaiters.settle(row.id, (w) => w.reject(error));
      failed = true;
      throw error;
    })
    .finally(() => {
      forget();
      // A row that failed here is driven again (here or elsewhere) and held again if it must be.
      if (failed) deps.feeHold.release(row.id);
      // A row that failed is reconciled by a pass at once. One that finished leaves nothing to sign
      // (rows enqueued meanwhile woke the loop themselves) and its housekeeping waits for the pause
      // the loop is in (at most `reconcileIntervalMs` while rows were in flight): not waking here
      // keeps the loop's store reads off the path of the outcome's waiters.
      if (failed) deps.failed();
    });
}
