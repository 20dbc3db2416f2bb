import type { Logger } from "pino";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import {
  checkClaimRequest,
  claimRequestHash,
  newClaimToken,
  type ReplayGuard,
  replayKeyHash,
} from "./replayGuard.ts";
import type { Store } from "./store.ts";

/** Rows deleted per pruning statement, so one prune never holds many locks or runs long. */
const PRUNE_BATCH = 5_000;

/**
 * A replay guard shared by every gate instance using one database (table `consumed_memos`, migrations
 * 0002 and 0190). One statement decides: the insert wins for a new key, and for a key whose row has
 * expired but not yet been pruned the conflicting row is taken over (for a claim, also a row in flight
 * for the same request whose lease has passed); every other caller gets no row back. Expired rows are
 * pruned lazily, at most once per `pruneIntervalMs`, in the background of a `consume` or `claim`.
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

  /** Starts a background prune when the interval has passed. */
  const pruneNowAndThen = (now: number) => {
    if (now >= nextPruneAt && pruning === undefined) {
      nextPruneAt = now + pruneIntervalMs;
      pruning = prune()
        .catch((error: unknown) => options.logger?.warn({ err: error }, "pruning consumed memos failed"))
        .finally(() => {
          pruning = undefined;
        });
    }
  };

  return {
    async consume(key, expiresAtMs) {
      checkExpiry(expiresAtMs);
      const now = clock.now();
      if (expiresAtMs <= now) return false;
      pruneNowAndThen(now);
      const rows = await store.query(
        `INSERT INTO consumed_memos (key_hash, expires_at_ms) VALUES ($1, $2)
         ON CONFLICT (key_hash) DO UPDATE SET expires_at_ms = EXCLUDED.expires_at_ms,
             request_hash = NULL, lease_until_ms = NULL, claim_token = NULL, claims = 0
           WHERE consumed_memos.expires_at_ms <= $3
         RETURNING 1 AS won`,
        [replayKeyHash(key), expiresAtMs, now],
      );
      return rows.length === 1;
    },
    async claim(key, expiresAtMs, claim) {
      checkExpiry(expiresAtMs);
      checkClaimRequest(claim);
      const now = clock.now();
      if (expiresAtMs <= now) return { ok: false, reason: "used" };
      pruneNowAndThen(now);
      const keyHash = replayKeyHash(key);
      const requestHash = Buffer.from(claimRequestHash(claim.request), "hex");
      const token = newClaimToken();
      // One statement decides, as for `consume`: a new key (or an expired row) is taken with a first
      // claim; a row in flight for the same request whose lease has passed is taken over while it has
      // claims left. The conflicting row is locked, so concurrent takeovers leave one winner.
      const won = await store.query(
        `INSERT INTO consumed_memos (key_hash, expires_at_ms, request_hash, lease_until_ms, claim_token, claims)
         VALUES ($1, $2, $3, $4, $5, 1)
         ON CONFLICT (key_hash) DO UPDATE SET expires_at_ms = EXCLUDED.expires_at_ms,
             request_hash = EXCLUDED.request_hash, lease_until_ms = EXCLUDED.lease_until_ms,
             claim_token = EXCLUDED.claim_token,
             claims = CASE WHEN consumed_memos.expires_at_ms <= $6 THEN 1 ELSE consumed_memos.claims + 1 END
           WHERE consumed_memos.expires_at_ms <= $6
              OR (consumed_memos.request_hash = $3 AND consumed_memos.lease_until_ms <= $6
                  AND consumed_memos.claims < $7)
         RETURNING 1 AS won`,
        [keyHash, expiresAtMs, requestHash, now + claim.leaseMs, token, now, claim.maxClaims],
      );
      if (won.length === 1) return { ok: true, token };
      // Lost: only why is read here, for the answer's Retry-After; it decides nothing.
      const [row] = await store.query<{ same: boolean; lease_until_ms: string | null }>(
        `SELECT request_hash IS NOT DISTINCT FROM $2 AS same, lease_until_ms::text AS lease_until_ms
         FROM consumed_memos WHERE key_hash = $1`,
        [keyHash, requestHash],
      );
      const leaseUntil = row?.lease_until_ms == null ? undefined : Number(row.lease_until_ms);
      if (row?.same === true && leaseUntil !== undefined && leaseUntil > now) {
        return { ok: false, reason: "in-flight", retryAfterMs: leaseUntil - now };
      }
      return { ok: false, reason: "used" };
    },
    async settle(key, expiresAtMs) {
      checkExpiry(expiresAtMs);
      if (expiresAtMs <= clock.now()) return;
      await store.query(
        `INSERT INTO consumed_memos (key_hash, expires_at_ms) VALUES ($1, $2)
         ON CONFLICT (key_hash) DO UPDATE SET request_hash = NULL, lease_until_ms = NULL, claim_token = NULL,
             expires_at_ms = GREATEST(consumed_memos.expires_at_ms, EXCLUDED.expires_at_ms)`,
        [replayKeyHash(key), expiresAtMs],
      );
    },
    async release(key, token) {
      // A key used for good is released without a token, a claim only by its own.
      await store.query(
        token === undefined
          ? "DELETE FROM consumed_memos WHERE key_hash = $1 AND claim_token IS NULL"
          : "DELETE FROM consumed_memos WHERE key_hash = $1 AND claim_token = $2",
        token === undefined ? [replayKeyHash(key)] : [replayKeyHash(key), token],
      );
    },
    prune,
    async close() {
      await pruning;
    },
  };
}

function checkExpiry(expiresAtMs: number): void {
  if (!Number.isSafeInteger(expiresAtMs)) {
    throw new TollgateError(ErrorCode.Internal, `expiresAtMs must be an integer: ${expiresAtMs}`);
  }
}
