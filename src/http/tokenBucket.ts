/**
 * Token buckets keyed by a string (a payer address, a client address): each key may spend `capacity`
 * requests at once and earns `refillPerSecond` back over time. Used by the facilitator's rate limits
 * (docs/facilitator.md, "Abuse: minimum amount and rate limits"); the clock is injected so tests move time instead of sleeping.
 *
 * Invariants:
 * - A key's level is never above `capacity` and never below 0; a refused take changes nothing.
 * - Memory is bounded: at most `maxKeys` buckets are held. When a new key arrives at the bound, the
 *   least recently used bucket is dropped; a dropped key starts again with a full bucket. That is the
 *   price of a bound: a flood of distinct keys can reset an idle key, never a busy one sooner than
 *   `maxKeys` other keys have been seen since its last request.
 * - Buckets live in this process: several facilitator instances each enforce their own limits.
 */
import type { Clock } from "../protocol/clock.ts";

export type TokenBucketRule = {
  /** Requests a key may make at once (the bucket's size). */
  capacity: number;
  /** Requests a key earns back per second. */
  refillPerSecond: number;
};

export type TakeResult = { ok: true } | { ok: false; retryAfterSeconds: number };

export type TokenBuckets = {
  /** Spends one token of `key`'s bucket, or says how long until one is there. */
  take(key: string): TakeResult;
  readonly size: number;
};

type Bucket = { tokens: number; at: number };

export function createTokenBuckets(
  rule: TokenBucketRule & { clock: Clock; maxKeys?: number | undefined },
): TokenBuckets {
  const { capacity, refillPerSecond, clock } = rule;
  if (!(capacity >= 1) || !Number.isFinite(capacity)) {
    throw new TypeError(`a rate limit's capacity must be at least 1, not ${capacity}`);
  }
  if (!(refillPerSecond > 0) || !Number.isFinite(refillPerSecond)) {
    throw new TypeError(`a rate limit's refill rate must be positive, not ${refillPerSecond}`);
  }
  const maxKeys = rule.maxKeys ?? 100_000;
  // Insertion-ordered, re-inserted on use: the first key is the least recently used.
  const buckets = new Map<string, Bucket>();

  return {
    get size() {
      return buckets.size;
    },
    take(key) {
      const now = clock.now();
      const bucket = buckets.get(key);
      let tokens = capacity;
      if (bucket !== undefined) {
        buckets.delete(key);
        // A clock that steps back earns nothing (and takes nothing away).
        const elapsed = Math.max(0, now - bucket.at) / 1000;
        tokens = Math.min(capacity, bucket.tokens + elapsed * refillPerSecond);
      } else if (buckets.size >= maxKeys) {
        const oldest = buckets.keys().next();
        if (oldest.done !== true) buckets.delete(oldest.value);
      }
      if (tokens >= 1) {
        buckets.set(key, { tokens: tokens - 1, at: now });
        return { ok: true };
      }
      buckets.set(key, { tokens, at: now });
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - tokens) / refillPerSecond)) };
    },
  };
}
