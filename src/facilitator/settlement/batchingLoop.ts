/**
 * The settlement engine's batching loop: claims batches (batchClaims.ts) while fewer than `maxInFlight`
 * are in flight, holds payments to fill the next batch while one is in flight, and sleeps until a
 * signal (loopSignals.ts), a batch's outcome, a hold's deadline or the backstop wakes it.
 *
 * Invariant: one claim of this loop runs at a time (`claiming`), and no claim starts once the loop is
 * stopped; what a claim took is in flight (inFlightBatches.ts) before the next claim starts.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import type { Outbox } from "../outbox/outboxTypes.ts";
import type { TokenPauseWatch } from "../tokenPauseWatch.ts";
import { claimBatch, type HeldBatch } from "./batchClaims.ts";
import type { InFlightBatches } from "./inFlightBatches.ts";
import type { LoopSignals } from "./loopSignals.ts";

export type BatchingLoopDeps = {
  store: Store;
  outbox: Outbox;
  network: string;
  batchSettler: Address;
  clock: Clock;
  log: Logger;
  signals: LoopSignals;
  inFlight: InFlightBatches;
  tokenPause?: Pick<TokenPauseWatch, "heldTokens"> | undefined;
  maxBatchSize: number;
  lingerMs: number;
  maxInFlight: number;
  reconcileIntervalMs: number;
  idlePollMs: number;
};

export type BatchingLoop = {
  /** Between `open()` and `stop()`. */
  readonly running: boolean;
  /** A claim of the loop is running. */
  readonly claiming: boolean;
  /** The engine accepts payments (before the loop's first round: start-up work runs in between). */
  open(): void;
  /** Starts the rounds. */
  run(): void;
  /** No new round or claim; resolves when the round in progress ended. */
  stop(): Promise<void>;
};

export function createBatchingLoop(deps: BatchingLoopDeps): BatchingLoop {
  const state = { running: false, claiming: false, done: undefined as Promise<void> | undefined };
  return {
    get running() {
      return state.running;
    },
    get claiming() {
      return state.claiming;
    },
    open() {
      state.running = true;
    },
    run() {
      state.done = loop(deps, state);
    },
    async stop() {
      state.running = false;
      deps.signals.wake();
      await state.done;
    },
  };
}

type LoopState = { running: boolean; claiming: boolean };

/** Claims batches while fewer than `maxInFlight` are in flight; says so when work is held to fill one. */
async function tick(deps: BatchingLoopDeps, state: LoopState): Promise<HeldBatch | undefined> {
  const { signals, inFlight } = deps;
  // A claim is due without a look at the queue's head when a hold just ended, or when nothing is in
  // flight and payments were queued since the last round (not on the start-up or backstop round,
  // which may well find nothing).
  let claimAtOnce = signals.holdEnded || (inFlight.size === 0 && signals.signals !== signals.signalsSeen);
  signals.holdEnded = false;
  signals.signalsSeen = signals.signals;
  // Payments in a paused token wait in the queue; its unpause signals the loop (the engine's `start`).
  const heldTokens = deps.tokenPause?.heldTokens() ?? [];
  while (state.running && inFlight.size < deps.maxInFlight && signals.pendingMaybe) {
    const before = signals.signals;
    state.claiming = true;
    const claimed = await claimBatch(
      { store: deps.store, outbox: deps.outbox, network: deps.network, batchSettler: deps.batchSettler },
      {
        maxBatchSize: deps.maxBatchSize,
        lingerMs: deps.lingerMs,
        inFlight: inFlight.size,
        claimAtOnce,
        heldTokens,
      },
    ).finally(() => {
      state.claiming = false;
    });
    if (claimed === undefined) {
      if (signals.signals === before) signals.pendingMaybe = false;
      return undefined;
    }
    if ("kind" in claimed) return claimed;
    claimAtOnce = false;
    inFlight.add(claimed);
    // Nothing else was pending: a payment queued since then signals, so the loop looks again anyway.
    if (claimed.drained) {
      if (signals.signals === before) signals.pendingMaybe = false;
      return undefined;
    }
  }
  return undefined;
}

async function loop(deps: BatchingLoopDeps, state: LoopState): Promise<void> {
  const { signals, clock } = deps;
  let lastPrune = clock.now();
  while (state.running) {
    signals.beginRound();
    let held: HeldBatch | undefined;
    try {
      held = await tick(deps, state);
      if (clock.now() - lastPrune >= deps.reconcileIntervalMs) {
        lastPrune = clock.now();
        await deps.inFlight.prune();
      }
    } catch (error) {
      deps.log.error({ err: error }, "settlement loop error");
    }
    if (!state.running) break;
    if (held === undefined) {
      if (signals.dirty) continue;
      const woken = await signals.pause(
        deps.inFlight.size > 0 ? Math.min(deps.reconcileIntervalMs, 200) : deps.idlePollMs,
      );
      // The backstop: a read for what no signal announced (a lost notification, a dead instance's rows).
      if (!woken) signals.backstop();
      continue;
    }
    await holdForBatch(deps, held);
  }
}

/** Held: waits for the oldest payment's linger to end, a full batch, or an outcome (`wakeNow`). */
async function holdForBatch(deps: BatchingLoopDeps, held: HeldBatch): Promise<void> {
  const { signals } = deps;
  const room = deps.maxBatchSize - held.waiting - signals.arrivals;
  if (room <= 0 || signals.outcomeSeen) return;
  signals.holdRoom = room;
  await signals.pause(Math.max(1, Math.ceil(deps.lingerMs - held.ageMs)));
  signals.holdRoom = undefined;
  // Ended by its deadline or by a full batch, not by an outcome: the next claim need not look first.
  signals.holdEnded = !signals.outcomeSeen;
}
