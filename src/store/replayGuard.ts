import { createHash } from "node:crypto";

/**
 * Remembers consumed payment memos so a proof is accepted once (DESIGN.md §2.4, §5).
 *
 * Contract shared by every implementation:
 * - `consume(key, expiresAtMs)` resolves `true` for exactly one call per key while the key is
 *   remembered, `false` for every other call, however many run concurrently (across processes for
 *   the PostgreSQL and Redis guards).
 * - A key is remembered until `expiresAtMs` (the memo's own expiry, ms since the epoch); after that it
 *   may be forgotten, which is safe because the gate refuses an expired memo before asking.
 * - A key whose `expiresAtMs` has already passed is refused (`false`): the guard could not remember it.
 * - `release(key)` forgets a consumed key, so that exactly one later `consume` of it succeeds again
 *   (the gate releases a proof whose request was not served). Releasing a key that is not remembered
 *   (never consumed, already released or expired) is a no-op. Only the caller that consumed a key
 *   may release it, once; a release racing a consume of the same key leaves at most one winner.
 * - `close()` releases what the guard opened itself (never a store or client it was given).
 */
export type ReplayGuard = {
  consume(key: string, expiresAtMs: number): Promise<boolean>;
  release(key: string): Promise<void>;
  close?(): Promise<void>;
};

/** sha256 of a replay key: a fixed size to store however long the memo is. */
export function replayKeyHash(key: string): Buffer {
  return createHash("sha256").update(key, "utf8").digest();
}
