/**
 * The outbox worker's main loop and its passes: reconcile open rows (the stale ones, all of them on the
 * first pass and while the chain was away) → sign queued rows and drive them → heartbeat the rows
 * driven here → look for a chain that lost recorded transactions. Between passes the loop sleeps until
 * a producer wakes it, a drive fails, or its interval ends (createOutbox.ts for the invariants).
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import { isChainUnreachable } from "../chainErrors.ts";
import { createWakeablePause } from "../wakeablePause.ts";
import type { GasKey } from "./gasKey.ts";
import { type OutboxRow, openOutboxRows, touchRows } from "./outboxRecords.ts";
import type { RewindCheck } from "./rewindCheck.ts";
import type { RowTracker } from "./rowTracker.ts";
import { signQueuedRows } from "./signQueuedRows.ts";

export type OutboxPassesDeps = {
  store: Store;
  key: GasKey;
  scope: { chainId: number; sender: Address };
  clock: Clock;
  log: Logger;
  tracker: RowTracker;
  rewind: RewindCheck;
  /** The kinds with a handler (the rows this worker signs and drives). */
  kinds: () => string[];
  /** The block a row signed now is known to land in at the earliest. */
  fromBlock: () => Promise<bigint>;
  maxSignPerPass: number;
  staleMs: number;
  reconcileIntervalMs: number;
  idlePollMs: number;
};

export type OutboxPasses = {
  readonly running: boolean;
  /** From now on `running` (before the loop's first pass: the store's notification is subscribed in between). */
  open(): void;
  /** Starts the loop. */
  run(): void;
  /** No new pass: `running` is false and the pause in progress ends. */
  halt(): void;
  /** Resolves when the pass in progress ended. */
  done(): Promise<void>;
  /** Cancels a look `checkLater` planned. */
  clearLater(): void;
  /** Look again at once: a producer committed rows (`committed`), or a drive failed or a waiter asks. */
  wake(committed: boolean): void;
  /**
   * A row was enqueued on the store (here or by another worker): look again after `reconcileIntervalMs`.
   * Not at once: the worker that enqueued it signs it; this one only watches it in case that one dies.
   */
  checkLater(): void;
  /** Signs queued rows and drives them, until a pass signs fewer than `maxSignPerPass`. */
  signAndSend(): Promise<void>;
  /** Signs what is queued and drives every open row to its outcome, now. */
  flush(): Promise<void>;
};

type PassState = {
  running: boolean;
  dirty: boolean;
  /**
   * A producer said rows were committed (`wake`) since the last signing pass began: that pass need
   * not look first whether any is queued.
   */
  committed: boolean;
  signing: Promise<unknown>;
  /** The first reconcile of this worker takes every open row, stale or not (a restart). */
  reconciledOnce: boolean;
  lastReconcile: number;
  lastTouch: number;
  laterCheck: ReturnType<typeof setTimeout> | undefined;
  sleeper: ReturnType<typeof createWakeablePause>;
  done: Promise<void> | undefined;
};

export function createOutboxPasses(deps: OutboxPassesDeps): OutboxPasses {
  const state: PassState = {
    running: false,
    dirty: false,
    committed: false,
    signing: Promise.resolve(),
    reconciledOnce: false,
    lastReconcile: 0,
    lastTouch: 0,
    laterCheck: undefined,
    sleeper: createWakeablePause(),
    done: undefined,
  };
  return {
    get running() {
      return state.running;
    },
    open() {
      state.running = true;
    },
    run() {
      state.done = loop(deps, state);
    },
    halt() {
      state.running = false;
      state.sleeper.wake();
    },
    async done() {
      await state.done;
    },
    clearLater() {
      if (state.laterCheck !== undefined) clearTimeout(state.laterCheck);
      state.laterCheck = undefined;
    },
    wake(committed) {
      if (committed) state.committed = true;
      state.dirty = true;
      state.sleeper.wake();
    },
    checkLater() {
      if (state.laterCheck !== undefined) return;
      state.laterCheck = setTimeout(() => {
        state.laterCheck = undefined;
        state.sleeper.wake();
      }, deps.reconcileIntervalMs);
      state.laterCheck.unref?.();
    },
    signAndSend: () => signAndSend(deps, state),
    flush: () => flush(deps, state),
  };
}

/** Signs queued rows, one pass at a time (signQueuedRows.ts). */
function signQueued(deps: OutboxPassesDeps, state: PassState): Promise<OutboxRow[]> {
  const run = () => {
    const told = state.committed;
    state.committed = false;
    return signQueuedRows({
      store: deps.store,
      key: deps.key,
      scope: deps.scope,
      kinds: deps.kinds(),
      limit: deps.maxSignPerPass,
      fromBlock: deps.fromBlock,
      knownQueued: told,
    });
  };
  const result = state.signing.then(run, run);
  state.signing = result.catch(() => undefined);
  return result;
}

async function signAndSend(deps: OutboxPassesDeps, state: PassState): Promise<void> {
  for (;;) {
    const signed = await signQueued(deps, state);
    for (const row of signed) deps.tracker.track(row, true);
    if (signed.length < deps.maxSignPerPass) return;
  }
}

async function reconcile(deps: OutboxPassesDeps, state: PassState, all: boolean): Promise<void> {
  const first = !state.reconciledOnce;
  const rows = await openOutboxRows(
    deps.store,
    deps.scope,
    deps.kinds(),
    all || first ? undefined : deps.staleMs,
  );
  state.reconciledOnce = true;
  state.lastReconcile = deps.clock.now();
  for (const row of rows) if (!deps.tracker.inFlight.has(row.id)) deps.tracker.track(row, false);
}

async function heartbeat(deps: OutboxPassesDeps, state: PassState): Promise<void> {
  const { inFlight } = deps.tracker;
  if (inFlight.size === 0 || deps.clock.now() - state.lastTouch < deps.staleMs / 3) return;
  state.lastTouch = deps.clock.now();
  await touchRows(deps.store, [...inFlight.keys()]);
}

async function pass(deps: OutboxPassesDeps, state: PassState): Promise<void> {
  const { chainDown } = deps.rewind;
  if (
    chainDown ||
    !state.reconciledOnce ||
    deps.clock.now() - state.lastReconcile >= deps.reconcileIntervalMs
  ) {
    // While the chain was away, rows this worker failed to drive are not stale yet: take them all, in
    // nonce order, before signing more.
    await reconcile(deps, state, chainDown);
  }
  await signAndSend(deps, state);
  await heartbeat(deps, state);
  await deps.rewind.repairIfRewound();
}

async function loop(deps: OutboxPassesDeps, state: PassState): Promise<void> {
  const { rewind, tracker } = deps;
  let failing = false;
  while (state.running) {
    state.dirty = false;
    try {
      await pass(deps, state);
      failing = false;
      if (tracker.inFlight.size === 0) rewind.setChainDown(false);
    } catch (error) {
      if (isChainUnreachable(error)) rewind.setChainDown(true);
      if (!failing) deps.log.warn({ err: error }, "outbox pass failed; it will be retried");
      failing = true;
    }
    if (!state.running) break;
    if (state.dirty && !rewind.chainDown && !failing) continue;
    const watching =
      tracker.inFlight.size > 0 || rewind.chainDown || failing || (await othersOpen(deps).catch(() => true));
    await state.sleeper.pause(watching ? deps.reconcileIntervalMs : deps.idlePollMs);
  }
}

/** Whether rows of this key that this worker does not drive are open (another worker's, or a dead one's). */
async function othersOpen(deps: OutboxPassesDeps): Promise<boolean> {
  const rows = await deps.store.query<{ id: string }>(
    `SELECT id FROM tx_outbox WHERE status IN ('signed', 'broadcast') AND chain_id = $1 AND sender = $2
       ORDER BY id LIMIT 256`,
    [deps.scope.chainId, deps.scope.sender.toLowerCase()],
  );
  return rows.some((row) => !deps.tracker.inFlight.has(Number(row.id)));
}

async function flush(deps: OutboxPassesDeps, state: PassState): Promise<void> {
  const { inFlight } = deps.tracker;
  await reconcile(deps, state, true);
  await signAndSend(deps, state);
  const driven = new Set<Promise<void>>();
  while (inFlight.size > 0) {
    for (const promise of inFlight.values()) driven.add(promise);
    const settled = Promise.allSettled([...inFlight.values()]);
    // Rows stuck behind a nonce the chain lost would never settle: look for a rewind meanwhile.
    const done = await Promise.race([settled.then(() => true), pauseMs(deps.reconcileIntervalMs, false)]);
    if (!done)
      await deps.rewind
        .repairIfRewound()
        .catch((error: unknown) => deps.log.warn({ err: error }, "rewind check failed"));
  }
  const errors = (await Promise.allSettled([...driven])).flatMap((r) =>
    r.status === "rejected" ? [r.reason as unknown] : [],
  );
  if (errors.length > 0) throw errors[0];
}

/** Resolves `value` after `ms` without keeping the process alive. */
function pauseMs<T>(ms: number, value: T): Promise<T> {
  return new Promise((resolve) => setTimeout(() => resolve(value), ms).unref?.());
}
