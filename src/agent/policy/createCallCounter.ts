import type { Clock } from "../../protocol/clock.ts";

/** Which calls are counted together: one agent's calls to one provider's plan. */
export type CallKey = { agent: string; provider: string; planId?: string | undefined };

export type CallCounter = {
  /** Notes one call now (paid once or covered by a subscription), counted in windows of up to `intervalSeconds`. */
  record(key: CallKey, intervalSeconds: number): void;
  /** Calls recorded in the last `intervalSeconds` (the window is `(now − interval, now]`). */
  count(key: CallKey, intervalSeconds: number): number;
  /** Forgets a key's calls, e.g. when the provider's plan changes. */
  forget(key: CallKey): void;
};

/**
 * Counts calls per (agent, provider, plan) in a rolling window, the `history` the policy's
 * break-even rule needs. Record every call to the plan's provider, however it was paid: after a
 * subscription lapses under steady use the count then shows the calls it covered and the policy
 * renews at once, instead of paying once up to the plan price all over again (bench/policy.ts
 * measures both ways). In memory, one process: a restart starts the count over, which can only
 * delay a subscription, never cause one.
 *
 * Memory: each key keeps the times of its calls within the longest interval it was given, at most
 * `maxCallsPerKey` of them (default 10 000). Past that cap the
 * oldest are dropped and `count` reports at most the cap, far beyond any plan's break-even point.
 * @example
 * const counter = createCallCounter({ clock: systemClock });
 * const key = { agent, provider: payTo, planId };
 * const decision = decide({ offer, history: counter.count(key, plan.interval) });
 * // … pay once or subscribe, make the call, then:
 * counter.record(key, plan.interval);
 */
export function createCallCounter(options: {
  clock: Clock;
  maxCallsPerKey?: number | undefined;
}): CallCounter {
  const { clock } = options;
  const maxCalls = options.maxCallsPerKey ?? 10_000;
  if (!Number.isSafeInteger(maxCalls) || maxCalls < 1) {
    throw new RangeError("maxCallsPerKey must be a positive integer");
  }
  const assertInterval = (seconds: number) => {
    if (!Number.isFinite(seconds) || seconds <= 0) throw new RangeError("intervalSeconds must be positive");
  };
  // Invariant: `times` is sorted ascending (times come from `clock.now()` as calls are recorded;
  // a clock stepping back is clamped to the last time so the order holds).
  const entries = new Map<string, { times: number[]; keepMs: number }>();
  const keyOf = (key: CallKey) => `${key.agent}\n${key.provider.toLowerCase()}\n${key.planId ?? ""}`;

  function prune(entry: { times: number[]; keepMs: number }, now: number): void {
    const cutoff = now - entry.keepMs;
    let drop = 0;
    while (drop < entry.times.length && entry.times[drop]! <= cutoff) drop += 1;
    if (entry.times.length - drop > maxCalls) drop = entry.times.length - maxCalls;
    if (drop > 0) entry.times.splice(0, drop);
  }

  return {
    record(key, intervalSeconds) {
      assertInterval(intervalSeconds);
      const id = keyOf(key);
      let entry = entries.get(id);
      if (entry === undefined) {
        entry = { times: [], keepMs: 0 };
        entries.set(id, entry);
      }
      entry.keepMs = Math.max(entry.keepMs, intervalSeconds * 1000);
      const last = entry.times[entry.times.length - 1];
      const now = Math.max(clock.now(), last ?? Number.NEGATIVE_INFINITY);
      entry.times.push(now);
      prune(entry, now);
    },
    count(key, intervalSeconds) {
      assertInterval(intervalSeconds);
      const id = keyOf(key);
      const entry = entries.get(id);
      if (entry === undefined) return 0;
      const intervalMs = intervalSeconds * 1000;
      entry.keepMs = Math.max(entry.keepMs, intervalMs);
      const now = clock.now();
      prune(entry, now);
      if (entry.times.length === 0) {
        entries.delete(id);
        return 0;
      }
      const cutoff = now - intervalMs;
      // Binary search for the first time inside the window.
      let lo = 0;
      let hi = entry.times.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (entry.times[mid]! <= cutoff) lo = mid + 1;
        else hi = mid;
      }
      return entry.times.length - lo;
    },
    forget(key) {
      entries.delete(keyOf(key));
    },
  };
}
