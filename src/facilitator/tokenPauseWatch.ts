/**
 * Follows whether the tokens a facilitator settles in are paused by their issuer (USDC's pauser:
 * FiatToken's `pause()` stops every transfer until `unpause()`), so that everything that moves the token
 * holds instead of sending transactions that would revert and failing payments that did nothing wrong
 * (docs/facilitator.md, "When the token is paused").
 *
 * How it learns:
 * - it reads `paused()` every `intervalMs` (default 15 s): one call per token per interval. Not the chain
 *   watch (chainWatch.ts): it follows every log of an address, and USDC's on Base is every transfer;
 * - at once when a chain refusal names the pause (`suspect`): a simulation of a new payment, a batch
 *   item that reverted "Pausable: paused" (fiatTokenRevertNames.ts);
 * - a token without `paused()` (any token that cannot pause) is read once and then left.
 *
 * Invariants:
 * 1. The state is kept per (chain, token) in the store (`token_pauses`). A change is a compare-and-set
 *    on that row, and its event (`token.paused` / `token.unpaused`, typed in protocol/webhook.ts) is
 *    written in the same transaction: instances sharing a database write each event once, and a restart
 *    finds the pause (and its `since`) where it was.
 * 2. The local answer (`isPaused`) may lag the chain by one interval either way. That is safe: a worker
 *    that sends while the token is paused has its items refused as `TokenPaused`, which holds them
 *    (never fails them) and calls `suspect`, which holds the token until `paused()` is read (so the requeued
 *    items are not sent again meanwhile); one that holds a little after the unpause only waits.
 * 3. Listeners of `onResume` are called after the unpause is recorded, so what they then claim is sent.
 */
import type { Logger } from "pino";
import {
  type Address,
  BaseError,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  getAddress,
} from "viem";
import { isTokenPaused } from "../chain/actions/usdc/isTokenPaused.ts";
import type { ReadClient } from "../chain/clientTypes.ts";
import type { Clock } from "../protocol/clock.ts";
import type { TokenPausedEventData, TokenUnpausedEventData } from "../protocol/webhook.ts";
import type { Queryable, Store } from "../store/store.ts";
import { isChainUnreachable } from "./chainErrors.ts";
import {
  readTokenPause,
  recordTokenPaused,
  recordTokenUnpaused,
  type TokenPauseState,
} from "./tokenPauseRecords.ts";
import { createWakeablePause } from "./wakeablePause.ts";

/** A token paused now, and since when this facilitator (or another sharing its store) first saw it. */
export type PausedToken = { token: Address; symbol: string | undefined; since: Date };

export type TokenPauseWatch = {
  /**
   * Whether `token` is paused as last seen, or a chain refusal named the pause and `paused()` has not been
   * read since; false for a token never seen paused or that cannot pause.
   */
  isPaused(token: string): boolean;
  /** The tokens paused now. */
  paused(): readonly PausedToken[];
  /**
   * The tokens (lower case) whose transfers are held: paused, or named by a refusal and not read since.
   * What moves tokens asks this, so items a refusal requeued wait for the read instead of being sent again.
   */
  heldTokens(): readonly string[];
  /** A chain refusal said `token` is paused: read `paused()` now (without waiting for it). */
  suspect(token: string): void;
  /** Reads `paused()` of every token that can pause and records what changed. */
  check(): Promise<void>;
  /** Calls `listener` with a token once its unpause is recorded. Returns a function that stops it. */
  onResume(listener: (token: Address) => void): () => void;
  start(): Promise<void>;
  stop(): Promise<void>;
};

export type TokenPauseWatchOptions = {
  store: Store;
  client: ReadClient;
  chainId: number;
  network: string;
  tokens: readonly { address: Address; symbol?: string | undefined }[];
  clock: Clock;
  logger: Logger;
  metrics?: { onTokenPaused(token: string, paused: boolean): void } | undefined;
  /** Appends an event to the event log, in the transaction given (FacilitatorContext.recordEvent). */
  recordEvent(db: Queryable, type: "token.paused", data: TokenPausedEventData): Promise<void>;
  recordEvent(db: Queryable, type: "token.unpaused", data: TokenUnpausedEventData): Promise<void>;
  /** How often `paused()` is read (default 15 000 ms). */
  intervalMs?: number | undefined;
};

/** The watch's state, shared by its steps below. */
type PauseWatch = {
  options: TokenPauseWatchOptions;
  log: Logger;
  intervalMs: number;
  symbols: Map<string, string | undefined>;
  /** Tokens whose `paused()` is read: every served one until it proves to have none. */
  pausable: Set<string>;
  known: Map<string, TokenPauseState>;
  /**
   * Tokens a chain refusal named as paused, held until `paused()` is read: without it, the items that
   * refusal requeued would be claimed and sent again before the read lands.
   */
  suspected: Set<string>;
  listeners: Set<(token: Address) => void>;
  sleeper: ReturnType<typeof createWakeablePause>;
  running: boolean;
  loopDone: Promise<void> | undefined;
  /** The check in progress; a `suspect` during it asks for one more after it. */
  checking: Promise<void> | undefined;
  again: boolean;
  /** Whether the last read failed for want of the chain (reported once, not every interval). */
  unreachable: boolean;
};

export function createTokenPauseWatch(options: TokenPauseWatchOptions): TokenPauseWatch {
  const symbols = new Map(options.tokens.map((t) => [t.address.toLowerCase(), t.symbol]));
  const w: PauseWatch = {
    options,
    log: options.logger.child({ component: "token-pause" }),
    intervalMs: options.intervalMs ?? 15_000,
    symbols,
    pausable: new Set(symbols.keys()),
    known: new Map(),
    suspected: new Set(),
    listeners: new Set(),
    sleeper: createWakeablePause(),
    running: false,
    loopDone: undefined,
    checking: undefined,
    again: false,
    unreachable: false,
  };
  const { known, suspected } = w;

  return {
    isPaused: (token) =>
      known.get(token.toLowerCase())?.paused === true || suspected.has(token.toLowerCase()),
    paused() {
      const out: PausedToken[] = [];
      for (const [token, state] of known) {
        if (state.paused)
          out.push({ token: getAddress(token), symbol: symbols.get(token), since: state.since });
      }
      return out;
    },
    heldTokens() {
      const out = new Set(suspected);
      for (const [token, state] of known) if (state.paused) out.add(token);
      return [...out];
    },
    suspect(token) {
      const key = token.toLowerCase();
      if (!w.pausable.has(key)) return;
      if (known.get(key)?.paused === true) return;
      suspected.add(key);
      check(w).catch((error: unknown) => w.log.error({ err: error }, "token pause check failed"));
    },
    check: () => check(w),
    onResume(listener) {
      w.listeners.add(listener);
      return () => w.listeners.delete(listener);
    },
    start: () => start(w),
    async stop() {
      w.running = false;
      w.sleeper.wake();
      await w.loopDone;
      await w.checking?.catch(() => undefined);
    },
  };
}

async function start(w: PauseWatch): Promise<void> {
  if (w.running) return;
  // What an earlier run (or another instance) recorded holds until the chain is read.
  for (const token of w.pausable) {
    const stored = await readTokenPause(w.options.store, w.options.chainId, token);
    if (stored !== undefined) w.known.set(token, stored);
    w.options.metrics?.onTokenPaused(token, stored?.paused === true);
  }
  w.running = true;
  w.loopDone = loop(w);
}

async function loop(w: PauseWatch): Promise<void> {
  while (w.running) {
    try {
      await check(w);
    } catch (error) {
      w.log.error({ err: error }, "recording the token's pause state failed; it is read again");
    }
    if (!w.running) break;
    await w.sleeper.pause(w.intervalMs);
  }
}

/** Reads every pausable token, or asks the check in progress for one more round. */
function check(w: PauseWatch): Promise<void> {
  if (w.checking !== undefined) {
    w.again = true;
    return w.checking;
  }
  w.checking = checkAll(w).finally(() => {
    w.checking = undefined;
  });
  return w.checking;
}

async function checkAll(w: PauseWatch): Promise<void> {
  do {
    w.again = false;
    for (const token of [...w.pausable]) await checkToken(w, token);
  } while (w.again && w.running);
}

async function checkToken(w: PauseWatch, token: string): Promise<void> {
  const { log } = w;
  let paused: boolean;
  try {
    paused = await isTokenPaused(w.options.client, { token: token as Address });
    if (w.unreachable) log.info("the chain answers again; token pause state read");
    w.unreachable = false;
  } catch (error) {
    if (!hasNoPausedFunction(error)) {
      // The chain could not answer (unreachable, or an RPC error): asked again next round.
      if (!w.unreachable) log.warn({ err: error }, "cannot read whether the token is paused; reading again");
      w.unreachable = true;
      return;
    }
    // No `paused()`: the token cannot be paused (the call reverts or returns nothing).
    w.pausable.delete(token);
    if (w.suspected.delete(token)) tellResumed(w, token);
    log.debug({ token }, "the token has no paused(); it is not watched");
    w.options.metrics?.onTokenPaused(token, false);
    return;
  }
  const was = w.known.get(token);
  const wasSuspected = w.suspected.delete(token);
  if (paused && was?.paused !== true) await recordPaused(w, token);
  else if (!paused && (was === undefined || was.paused)) await recordUnpaused(w, token);
  else if (!paused && wasSuspected) {
    // The refusal was not the pause after all (or it ended already): what it held is sent again.
    tellResumed(w, token);
  }
}

function tellResumed(w: PauseWatch, token: string): void {
  for (const listener of w.listeners) listener(getAddress(token));
}

/** Records a pause seen on chain; the event is written when this call is the one that flips the row. */
async function recordPaused(w: PauseWatch, token: string): Promise<void> {
  const { options } = w;
  const now = new Date(options.clock.now());
  const state = await recordTokenPaused(options.store, options, token, now);
  const since = state.state?.since ?? now;
  w.known.set(token, { paused: true, since });
  options.metrics?.onTokenPaused(token, true);
  if (state.flipped) {
    w.log.warn(
      { event: "token.paused", token: getAddress(token), since: since.toISOString() },
      "the token's issuer paused it: settlement in it is held until it is unpaused",
    );
  }
}

/** Records an unpause seen on chain; the event is written when this call is the one that flips the row. */
async function recordUnpaused(w: PauseWatch, token: string): Promise<void> {
  const { options } = w;
  const now = new Date(options.clock.now());
  const pausedSince = await recordTokenUnpaused(options.store, options, token, now);
  const was = w.known.get(token);
  w.known.set(token, { paused: false, since: now });
  options.metrics?.onTokenPaused(token, false);
  if (pausedSince !== undefined || was?.paused === true) {
    w.log.info(
      {
        event: "token.unpaused",
        token: getAddress(token),
        pausedSince: (pausedSince ?? was?.since)?.toISOString(),
      },
      "the token is unpaused: held settlement resumes",
    );
  }
  if (was?.paused === true || pausedSince !== undefined) tellResumed(w, token);
}

/** Whether a `paused()` call failed because the contract has no such function (not for want of the chain). */
function hasNoPausedFunction(error: unknown): boolean {
  if (isChainUnreachable(error) || !(error instanceof BaseError)) return false;
  return (
    error.walk(
      (e) => e instanceof ContractFunctionZeroDataError || e instanceof ContractFunctionRevertedError,
    ) !== null
  );
}
