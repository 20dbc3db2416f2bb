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
import { z } from "zod";
import { isTokenPaused } from "../chain/actions/usdc/isTokenPaused.ts";
import type { ReadClient } from "../chain/clientTypes.ts";
import type { Clock } from "../protocol/clock.ts";
import type { TokenPausedEventData, TokenUnpausedEventData } from "../protocol/webhook.ts";
import { TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Queryable, Store } from "../store/store.ts";
import { isChainUnreachable } from "./chainErrors.ts";
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

const StateRowSchema = z.object({ paused: z.boolean(), since: TimestampColumnSchema });

type Known = { paused: boolean; since: Date };

export function createTokenPauseWatch(options: TokenPauseWatchOptions): TokenPauseWatch {
  const { store, client, chainId, clock } = options;
  const log = options.logger.child({ component: "token-pause" });
  const intervalMs = options.intervalMs ?? 15_000;
  const symbols = new Map(options.tokens.map((t) => [t.address.toLowerCase(), t.symbol]));
  /** Tokens whose `paused()` is read: every served one until it proves to have none. */
  const pausable = new Set(symbols.keys());
  const known = new Map<string, Known>();
  /**
   * Tokens a chain refusal named as paused, held until `paused()` is read: without it, the items that
   * refusal requeued would be claimed and sent again before the read lands.
   */
  const suspected = new Set<string>();
  const listeners = new Set<(token: Address) => void>();
  const sleeper = createWakeablePause();
  let running = false;
  let loopDone: Promise<void> | undefined;
  /** The check in progress; a `suspect` during it asks for one more after it. */
  let checking: Promise<void> | undefined;
  let again = false;
  /** Whether the last read failed for want of the chain (reported once, not every interval). */
  let unreachable = false;

  const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

  /** Records a pause seen on chain; writes the event when this call is the one that flips the row. */
  async function recordPaused(token: string): Promise<void> {
    const now = new Date(clock.now());
    const state = await store.transaction(async (tx) => {
      const flipped = await queryOneParsed(
        tx,
        StateRowSchema,
        `INSERT INTO token_pauses (chain_id, token, paused, since) VALUES ($1, $2, true, $3)
         ON CONFLICT (chain_id, token) DO UPDATE SET paused = true, since = EXCLUDED.since, updated_at = now()
         WHERE token_pauses.paused = false
         RETURNING paused, since`,
        [chainId, token, now],
      );
      if (flipped === undefined) return { state: await readStoredIn(tx, token), flipped: false };
      await options.recordEvent(tx, "token.paused", {
        network: options.network,
        token: getAddress(token),
        since: seconds(flipped.since),
      });
      return { state: flipped, flipped: true };
    });
    const since = state.state?.since ?? now;
    known.set(token, { paused: true, since });
    options.metrics?.onTokenPaused(token, true);
    if (state.flipped) {
      log.warn(
        { event: "token.paused", token: getAddress(token), since: since.toISOString() },
        "the token's issuer paused it: settlement in it is held until it is unpaused",
      );
    }
  }

  async function readStoredIn(db: Queryable, token: string): Promise<Known | undefined> {
    return queryOneParsed(
      db,
      StateRowSchema,
      "SELECT paused, since FROM token_pauses WHERE chain_id = $1 AND token = $2",
      [chainId, token],
    );
  }

  /** Records an unpause seen on chain; writes the event when this call is the one that flips the row. */
  async function recordUnpaused(token: string): Promise<void> {
    const now = new Date(clock.now());
    const pausedSince = await store.transaction(async (tx) => {
      const stored = await queryOneParsed(
        tx,
        StateRowSchema,
        "SELECT paused, since FROM token_pauses WHERE chain_id = $1 AND token = $2 FOR UPDATE",
        [chainId, token],
      );
      if (stored?.paused !== true) return undefined;
      await tx.query(
        "UPDATE token_pauses SET paused = false, since = $3, updated_at = now() WHERE chain_id = $1 AND token = $2",
        [chainId, token, now],
      );
      await options.recordEvent(tx, "token.unpaused", {
        network: options.network,
        token: getAddress(token),
        pausedSince: seconds(stored.since),
        unpausedAt: seconds(now),
      });
      return stored.since;
    });
    const was = known.get(token);
    known.set(token, { paused: false, since: now });
    options.metrics?.onTokenPaused(token, false);
    if (pausedSince !== undefined || was?.paused === true) {
      log.info(
        {
          event: "token.unpaused",
          token: getAddress(token),
          pausedSince: (pausedSince ?? was?.since)?.toISOString(),
        },
        "the token is unpaused: held settlement resumes",
      );
    }
    if (was?.paused === true || pausedSince !== undefined) {
      for (const listener of listeners) listener(getAddress(token));
    }
  }

  async function checkToken(token: string): Promise<void> {
    let paused: boolean;
    try {
      paused = await isTokenPaused(client, { token: token as Address });
      if (unreachable) log.info("the chain answers again; token pause state read");
      unreachable = false;
    } catch (error) {
      if (!hasNoPausedFunction(error)) {
        // The chain could not answer (unreachable, or an RPC error): asked again next round.
        if (!unreachable) log.warn({ err: error }, "cannot read whether the token is paused; reading again");
        unreachable = true;
        return;
      }
      // No `paused()`: the token cannot be paused (the call reverts or returns nothing).
      pausable.delete(token);
      if (suspected.delete(token)) for (const listener of listeners) listener(getAddress(token));
      log.debug({ token }, "the token has no paused(); it is not watched");
      options.metrics?.onTokenPaused(token, false);
      return;
    }
    const was = known.get(token);
    const wasSuspected = suspected.delete(token);
    if (paused && was?.paused !== true) await recordPaused(token);
    else if (!paused && (was === undefined || was.paused)) await recordUnpaused(token);
    else if (!paused && wasSuspected) {
      // The refusal was not the pause after all (or it ended already): what it held is sent again.
      for (const listener of listeners) listener(getAddress(token));
    }
  }

  async function checkAll(): Promise<void> {
    do {
      again = false;
      for (const token of [...pausable]) await checkToken(token);
    } while (again && running);
  }

  function check(): Promise<void> {
    if (checking !== undefined) {
      again = true;
      return checking;
    }
    checking = checkAll().finally(() => {
      checking = undefined;
    });
    return checking;
  }

  async function loop(): Promise<void> {
    while (running) {
      try {
        await check();
      } catch (error) {
        log.error({ err: error }, "recording the token's pause state failed; it is read again");
      }
      if (!running) break;
      await sleeper.pause(intervalMs);
    }
  }

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
      if (!pausable.has(key)) return;
      if (known.get(key)?.paused === true) return;
      suspected.add(key);
      check().catch((error: unknown) => log.error({ err: error }, "token pause check failed"));
    },
    check,
    onResume(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async start() {
      if (running) return;
      // What an earlier run (or another instance) recorded holds until the chain is read.
      for (const token of pausable) {
        const stored = await readStoredIn(store, token);
        if (stored !== undefined) known.set(token, stored);
        options.metrics?.onTokenPaused(token, stored?.paused === true);
      }
      running = true;
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      await checking?.catch(() => undefined);
    },
  };
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
