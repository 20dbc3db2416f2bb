/**
 * The `token_pauses` rows the token pause watch keeps (tokenPauseWatch.ts): one per (chain, token). A
 * change is a compare-and-set on the row, and its event is written in the same transaction, so instances
 * sharing a database write each event once.
 */
import { getAddress } from "viem";
import { z } from "zod";
import type { TokenPausedEventData, TokenUnpausedEventData } from "../protocol/webhook.ts";
import { TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Queryable, Store } from "../store/store.ts";

const StateRowSchema = z.object({ paused: z.boolean(), since: TimestampColumnSchema });

/** A token's pause state as recorded: paused or not, and since when. */
export type TokenPauseState = z.infer<typeof StateRowSchema>;

/** Where a change is recorded: the chain, the network its events name, and the event log. */
export type TokenPauseScope = {
  chainId: number;
  network: string;
  /** Appends an event to the event log, in the transaction given (FacilitatorContext.recordEvent). */
  recordEvent(db: Queryable, type: "token.paused", data: TokenPausedEventData): Promise<void>;
  recordEvent(db: Queryable, type: "token.unpaused", data: TokenUnpausedEventData): Promise<void>;
};

const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

/** The recorded state of `token` (lower case), if any. */
export function readTokenPause(
  db: Queryable,
  chainId: number,
  token: string,
): Promise<TokenPauseState | undefined> {
  return queryOneParsed(
    db,
    StateRowSchema,
    "SELECT paused, since FROM token_pauses WHERE chain_id = $1 AND token = $2",
    [chainId, token],
  );
}

/**
 * Records `token` paused since `now` unless it is already; writes `token.paused` when this call is the
 * one that flips the row. Resolves with the row's state after it (`undefined` only if it vanished).
 */
export function recordTokenPaused(
  store: Store,
  scope: TokenPauseScope,
  token: string,
  now: Date,
): Promise<{ state: TokenPauseState | undefined; flipped: boolean }> {
  return store.transaction(async (tx) => {
    const flipped = await queryOneParsed(
      tx,
      StateRowSchema,
      `INSERT INTO token_pauses (chain_id, token, paused, since) VALUES ($1, $2, true, $3)
       ON CONFLICT (chain_id, token) DO UPDATE SET paused = true, since = EXCLUDED.since, updated_at = now()
       WHERE token_pauses.paused = false
       RETURNING paused, since`,
      [scope.chainId, token, now],
    );
    if (flipped === undefined)
      return { state: await readTokenPause(tx, scope.chainId, token), flipped: false };
    await scope.recordEvent(tx, "token.paused", {
      network: scope.network,
      token: getAddress(token),
      since: seconds(flipped.since),
    });
    return { state: flipped, flipped: true };
  });
}

/**
 * Records `token` unpaused at `now` if its row says paused, and writes `token.unpaused` with it.
 * Resolves with when the pause began, or `undefined` when this call flipped nothing.
 */
export function recordTokenUnpaused(
  store: Store,
  scope: TokenPauseScope,
  token: string,
  now: Date,
): Promise<Date | undefined> {
  return store.transaction(async (tx) => {
    const stored = await queryOneParsed(
      tx,
      StateRowSchema,
      "SELECT paused, since FROM token_pauses WHERE chain_id = $1 AND token = $2 FOR UPDATE",
      [scope.chainId, token],
    );
    if (stored?.paused !== true) return undefined;
    await tx.query(
      "UPDATE token_pauses SET paused = false, since = $3, updated_at = now() WHERE chain_id = $1 AND token = $2",
      [scope.chainId, token, now],
    );
    await scope.recordEvent(tx, "token.unpaused", {
      network: scope.network,
      token: getAddress(token),
      pausedSince: seconds(stored.since),
      unpausedAt: seconds(now),
    });
    return stored.since;
  });
}
