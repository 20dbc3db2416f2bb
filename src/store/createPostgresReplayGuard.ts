import type { Logger } from "pino";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import { type ReplayGuard, replayKeyHash } from "./replayGuard.ts";
import type { Store } from "./store.ts";

/** Rows deleted per pruning statement, so one prune never holds many locks or runs long. */
const PRUNE_BATCH = 5_000;

/**
 * A replay guard shared by every gate instance using one database (table `consumed_memos`, migration
 * 0002). One statement decides: the insert wins for a new key, and for a key whose row has expired but
 * not yet been pruned the conflicting row is taken over; every other caller gets no row back. Expired
 * rows are pruned lazily, at most once per `pruneIntervalMs`, in the background of a `consume`.
 * @example
 * const guard = createPostgresReplayGuard(store, { logger });
 */
export function createPostgresReplayGuard(
  store: Store,
  options: { clock?: Clock; pruneIntervalMs?: number; logger?: Logger | undefined } = {},
): ReplayGuard & { prune(): Promise<number>; close(): Promise<void> } {
  const clock = options.clock ?? systemClock;
  const pruneIntervalMs = options.pruneIntervalMs ?? 60_000;
  let nextPruneAt = clock.now() + pruneIntervalMs;
  let pruning: Promise<unknown> | undefined;

  const prune = async (): Promise<number> => {
    let total = 0;
    for (;;) {
      // SKIP LOCKED: instances pruning at once split the rows instead of queueing on each other.
      const rows = await store.query<{ n: string }>(
        `WITH gone AS (
           DELETE FROM consumed_memos WHERE key_hash IN (
             SELECT key_hash FROM consumed_memos WHERE expires_at_ms <= $1
             LIMIT $2 FOR UPDATE SKIP LOCKED)
           RETURNING 1)
         SELECT count(*) AS n FROM gone`,
        [clock.now(), PRUNE_BATCH],
      );
      const n = Number(rows[0]?.n ?? 0);
      total += n;
      if (n < PRUNE_BATCH) return total;
    }
  };

  return {
    async consume(key, expiresAtMs) {
      if (!Number.isSafeInteger(expiresAtMs)) {
        throw new TollgateError(ErrorCode.Internal, `expiresAtMs must be an integer: ${expiresAtMs}`);
      }
      const now = clock.now();
      if (expiresAtMs <= now) return false;
      if (now >= nextPruneAt && pruning === undefined) {
        nextPruneAt = now + pruneIntervalMs;
        pruning = prune()
          .catch((error: unknown) => options.logger?.warn({ err: error }, "pruning consumed memos failed"))
          .finally(() => {
            pruning = undefined;
          });
      }
      const rows = await store.query(
        `INSERT INTO consumed_memos (key_hash, expires_at_ms) VALUES ($1, $2)
         ON CONFLICT (key_hash) DO UPDATE SET expires_at_ms = EXCLUDED.expires_at_ms
           WHERE consumed_memos.expires_at_ms <= $3
         RETURNING 1 AS won`,
        [replayKeyHash(key), expiresAtMs, now],
      );
      return rows.length === 1;
    },
    async release(key) {
      await store.query("DELETE FROM consumed_memos WHERE key_hash = $1", [replayKeyHash(key)]);
    },
    prune,
    async close() {
      await pruning;
    },
  };
}
