/**
 * Subscription state as the chain has it, read through the facilitator's `GET /subscriptions/:id` and
 * cached for a short TTL (docs/protocol.md, "Subscription requests"), so a subscriber's requests cost no round trip.
 *
 * Staleness bound: an entry is at most `ttlMs` old. An entry is also dropped as soon as the gate
 * learns from the facilitator's event feed that the subscription changed (`invalidate`), which in
 * practice ends a paused, cancelled or past-due subscription's access within one poll of the feed.
 *
 * Invariants:
 * - Concurrent misses of one id share one request.
 * - Refresh ahead: an Active entry past `refreshAfterMs` (the gate uses three quarters of the TTL) is still served,
 *   and one read in the background (one per entry, even if it fails) replaces it, so a subscriber in steady use never waits for the
 *   facilitator; the bound above does not move (an entry older than the TTL is never served), and a
 *   background read that fails changes nothing (the next read at expiry decides).
 * - A read that was in flight when the id was invalidated is not cached: it may predate the change.
 * - "No such subscription" is cached like a state (for the same TTL), so unknown ids sent repeatedly
 *   cost the facilitator one request per TTL, not one per request.
 * - Negatives (unknown ids, and subscriptions that are not Active) are held apart from Active ones,
 *   each side bounded on its own (`maxEntries`, `maxNegativeEntries`; oldest dropped first). Anyone can
 *   name made-up ids, and a flood of them only ever displaces other negatives: it cannot push an
 *   Active subscriber's state out and make its requests cost a lookup again.
 */
import type { Clock } from "../../../protocol/clock.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";

/**
 * Whether an Active subscription's renewal is overdue: its paid period ended more than
 * `graceSeconds` ago and no renewal has been collected since. The contract keeps such a subscription
 * `Active` until someone calls `collect` (that is what moves it on, or to PastDue), so if renewals
 * stall — the keeper down, or a batch it cannot send — an Active status alone would serve a period
 * nobody paid for (test/security/overdueSubscription.test.ts).
 *
 * Both sides of the comparison are chain time from one facilitator answer: `currentPeriodEnd` and
 * `chainTime`, the latest block's timestamp when the subscription was read. Never the gate's clock:
 * a devnet's chain time can run days ahead of it (`tollgate devnet advance`) or stand still between
 * blocks, and the keeper judges due-ness by the same latest block, so a renewal the keeper could not
 * yet see as due is never called overdue here.
 */
export function isRenewalOverdue(info: SubscriptionInfo, graceSeconds: number): boolean {
  return info.status === "Active" && info.chainTime > info.currentPeriodEnd + graceSeconds;
}

/** The refusal message for an overdue renewal (see `isRenewalOverdue`). */
export function renewalOverdueMessage(info: SubscriptionInfo): string {
  const ended = new Date(info.currentPeriodEnd * 1000).toISOString().replace(".000Z", "Z");
  const late = info.chainTime - info.currentPeriodEnd;
  return `subscription ${info.subscriptionId}'s renewal is overdue: its paid period ended at ${ended} (chain time, ${late} s ago) and the next period has not been charged yet; it is served again once the renewal is collected`;
}

/** A subscription's state, or `undefined` for an id the chain does not know. */
export type SubscriptionState = SubscriptionInfo | undefined;

export type SubscriptionStatusCache = {
  /** The cached state if fresh, else read now. `maxAgeMs` tightens the TTL for this call. */
  get(subscriptionId: string, options?: { maxAgeMs?: number }): Promise<SubscriptionState>;
  /**
   * What `get` would answer without a read, as `{ state }`; `undefined` when it would have to read.
   * Starts the same refresh ahead as `get`.
   */
  cached(subscriptionId: string): { readonly state: SubscriptionState } | undefined;
  /** Drops the id (a newer state exists on chain). */
  invalidate(subscriptionId: string): void;
  readonly size: number;
};

export type SubscriptionStatusCacheOptions = {
  /** Reads a subscription; throws `NotFound` for an unknown id and anything else for a fault. */
  read(subscriptionId: string): Promise<SubscriptionInfo>;
  clock: Clock;
  /** Longest age of a cached state (default 5 000 ms). */
  ttlMs?: number | undefined;
  /** Age after which an Active entry is read again in the background while still served (default: never). */
  refreshAfterMs?: number | undefined;
  /** Active subscriptions held (default 10 000). */
  maxEntries?: number | undefined;
  /** Unknown ids and inactive subscriptions held (default 10 000). */
  maxNegativeEntries?: number | undefined;
};

/** `refreshing`: a background read was started for this entry (at most one per entry). */
type Entry = { state: SubscriptionState; at: number; refreshing?: boolean };

export function createSubscriptionStatusCache(
  options: SubscriptionStatusCacheOptions,
): SubscriptionStatusCache {
  const { clock, read } = options;
  const ttlMs = options.ttlMs ?? 5_000;
  const refreshAfterMs = options.refreshAfterMs ?? Number.POSITIVE_INFINITY;
  const maxEntries = options.maxEntries ?? 10_000;
  const maxNegativeEntries = options.maxNegativeEntries ?? 10_000;
  // Insertion-ordered: the first key of each map is its oldest entry.
  const active = new Map<string, Entry>();
  const negative = new Map<string, Entry>();
  const inflight = new Map<string, Promise<SubscriptionState>>();

  const store = (id: string, entry: Entry) => {
    active.delete(id);
    negative.delete(id);
    const [map, bound] =
      entry.state?.status === "Active" ? [active, maxEntries] : [negative, maxNegativeEntries];
    if (map.size >= bound) {
      const oldest = map.keys().next();
      if (oldest.done !== true) map.delete(oldest.value);
    }
    map.set(id, entry);
  };

  const fetchState = (id: string): Promise<SubscriptionState> => {
    const existing = inflight.get(id);
    if (existing !== undefined) return existing;
    const startedAt = clock.now();
    const pending: Promise<SubscriptionState> = read(id)
      .then(
        (info): SubscriptionState => info,
        (error: unknown): SubscriptionState => {
          if (isTollgateError(error, "NotFound")) return undefined;
          throw error;
        },
      )
      .then((state) => {
        // Cache only if no invalidation replaced this read while it was in flight.
        if (inflight.get(id) === pending) store(id, { state, at: startedAt });
        return state;
      })
      .finally(() => {
        if (inflight.get(id) === pending) inflight.delete(id);
      });
    inflight.set(id, pending);
    return pending;
  };

  /** The entry if younger than `maxAge`, starting its refresh ahead when due. */
  const fresh = (id: string, maxAge: number): Entry | undefined => {
    const entry = active.get(id) ?? negative.get(id);
    if (entry === undefined) return undefined;
    const age = clock.now() - entry.at;
    if (age >= maxAge) return undefined;
    // Only Active entries: what is refused anyway (unknown ids, inactive subscriptions) keeps
    // costing one read per TTL.
    if (age >= refreshAfterMs && entry.state?.status === "Active" && entry.refreshing !== true) {
      entry.refreshing = true;
      fetchState(id).catch(() => undefined);
    }
    return entry;
  };

  return {
    get size() {
      return active.size + negative.size;
    },
    get(id, getOptions = {}) {
      const entry = fresh(id, Math.min(ttlMs, getOptions.maxAgeMs ?? ttlMs));
      return entry === undefined ? fetchState(id) : Promise.resolve(entry.state);
    },
    cached: (id) => fresh(id, ttlMs),
    invalidate(id) {
      active.delete(id);
      negative.delete(id);
      inflight.delete(id);
    },
  };
}
