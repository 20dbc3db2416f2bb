/**
 * The outbox worker's second loop: compares recently confirmed rows with the chain
 * (confirmedRowWatch.ts) every `intervalMs` while any is in the window; with none, it sleeps until an
 * outcome of a watched kind is recorded here or a reopen hook is registered (`due`), or `idlePollMs`
 * (one store read, for outcomes another instance recorded). Rows it reopened are driven again here.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { Store } from "../../store/store.ts";
import { createWakeablePause } from "../wakeablePause.ts";
import type { ConfirmedRowWatch } from "./confirmedRowWatch.ts";
import { type OutboxRow, openOutboxRows } from "./outboxRecords.ts";

export type ReorgWatchLoopDeps = {
  store: Store;
  scope: { chainId: number; sender: Address };
  log: Logger;
  watch: ConfirmedRowWatch;
  intervalMs: number;
  idlePollMs: number;
  /** The kinds with a handler (the rows the worker drives). */
  kinds: () => string[];
  running: () => boolean;
  /** Whether this worker drives the row now. */
  inFlight: (id: number) => boolean;
  track: (row: OutboxRow) => void;
};

export type ReorgWatchLoop = {
  /** Confirmed rows may be in the watch's window: look at the next round rather than after `idlePollMs`. */
  due(): void;
  start(): void;
  /** Ends the pause in progress (the worker stops). */
  wake(): void;
  /** Resolves when the round in progress ended. */
  done(): Promise<void>;
};

export function createReorgWatchLoop(deps: ReorgWatchLoopDeps): ReorgWatchLoop {
  const sleeper = createWakeablePause();
  /** Confirmed rows may be in the watch's window: set at start and by every outcome recorded here. */
  const state = { due: true, done: undefined as Promise<void> | undefined };

  async function loop(): Promise<void> {
    let failing = false;
    while (deps.running()) {
      try {
        const { reopened, watching } = await deps.watch.check();
        state.due = watching;
        failing = false;
        if (reopened.length > 0) await trackReopened(deps, reopened);
      } catch (error) {
        if (!failing) deps.log.warn({ err: error }, "reorganisation watch failed; it will be retried");
        failing = true;
      }
      if (!deps.running()) break;
      if (state.due || failing) await sleeper.pause(deps.intervalMs);
      else await sleeper.pause(deps.idlePollMs);
    }
  }

  return {
    due() {
      if (state.due) return;
      state.due = true;
      sleeper.wake();
    },
    start() {
      state.done = loop();
    },
    wake: () => sleeper.wake(),
    done: async () => {
      await state.done;
    },
  };
}

/** Drives again the reopened rows this worker does not drive already. */
async function trackReopened(deps: ReorgWatchLoopDeps, reopened: readonly number[]): Promise<void> {
  for (const row of await openOutboxRows(deps.store, deps.scope, deps.kinds(), undefined)) {
    if (reopened.includes(row.id) && !deps.inFlight(row.id)) deps.track(row);
  }
}
