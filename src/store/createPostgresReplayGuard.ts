import type { Logger } from "pino";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import {
  checkClaimRequest,
  claimRequestHash,
  newClaimToken,
  type ReplayClaim,
  type ReplayClaimRequest,
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
  const pruner = new MemoPruner(store, clock, options.pruneIntervalMs ?? 60_000, options.logger);

  return {
    async consume(key, expiresAtMs) {
      checkExpiry(expiresAtMs);
      const now = clock.now();
      if (expiresAtMs <= now) return false;
      pruner.pruneNowAndThen(now);
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
      pruner.pruneNowAndThen(now);
      return claimKey(store, now, key, expiresAtMs, claim);
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
    prune: () => pruner.prune(),
    close: () => pruner.close(),
  };
}

/** Expired rows pruned in batches, in the background at most once per interval. */
class MemoPruner {
  #nextPruneAt: number;
  #pruning: Promise<unknown> | undefined;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly intervalMs: number,
    private readonly logger: Logger | undefined,
  ) {
    this.#nextPruneAt = clock.now() + intervalMs;
  }

  async prune(): Promise<number> {
    let total = 0;
    for (;;) {
      // SKIP LOCKED: instances pruning at once split the rows instead of queueing on each other.
      const rows = await this.store.query<{ n: string }>(
        `WITH gone AS (
           DELETE FROM consumed_memos WHERE key_hash IN (
             SELECT key_hash FROM consumed_memos WHERE expires_at_ms <= $1
             LIMIT $2 FOR UPDATE SKIP LOCKED)
           RETURNING 1)
         SELECT count(*) AS n FROM gone`,
        [this.clock.now(), PRUNE_BATCH],
      );
      const n = Number(rows[0]?.n ?? 0);
      total += n;
      if (n < PRUNE_BATCH) return total;
    }
  }

  /** Starts a background prune when the interval has passed. */
  pruneNowAndThen(now: number): void {
    if (now >= this.#nextPruneAt && this.#pruning === undefined) {
      this.#nextPruneAt = now + this.intervalMs;
      this.#pruning = this.prune()
        .catch((error: unknown) => this.logger?.warn({ err: error }, "pruning consumed memos failed"))
        .finally(() => {
          this.#pruning = undefined;
        });
    }
  }

  /** Waits for a background prune in progress. */
  async close(): Promise<void> {
    await this.#pruning;
  }
}

/**
 * One statement decides, as for `consume`: a new key (or an expired row) is taken with a first claim; a
 * row in flight for the same request whose lease has passed is taken over while it has claims left. The
 * conflicting row is locked, so concurrent takeovers leave one winner.
 */
async function claimKey(
  store: Store,
  now: number,
  key: string,
  expiresAtMs: number,
  claim: ReplayClaimRequest,
): Promise<ReplayClaim> {
  const keyHash = replayKeyHash(key);
  const requestHash = Buffer.from(claimRequestHash(claim.request), "hex");
  const token = newClaimToken();
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
}

function checkExpiry(expiresAtMs: number): void {
  if (!Number.isSafeInteger(expiresAtMs)) {
    throw new TollgateError(ErrorCode.Internal, `expiresAtMs must be an integer: ${expiresAtMs}`);
  }
}
