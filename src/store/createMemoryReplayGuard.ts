import type { Clock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import type { ReplayGuard } from "./replayGuard.ts";

/**
 * A replay guard for a single gate process. Expired keys are purged as time passes (a min-heap by
 * expiry, so each consume does O(log n) work); at most `maxEntries` keys are held. When full of
 * unexpired keys it refuses new ones with `RateLimited` (retry once the earliest key expires) rather
 * than forgetting a key early, which would let that proof be replayed.
 * @example
 * const guard = createMemoryReplayGuard({ clock: systemClock });
 * if (!(await guard.consume(memo, expiresAtMs))) return reject("memo already used");
 */
export function createMemoryReplayGuard(options: {
  clock: Clock;
  maxEntries?: number;
}): ReplayGuard & { readonly size: number; close(): Promise<void> } {
  const maxEntries = options.maxEntries ?? 100_000;
  if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) {
    throw new TollgateError(ErrorCode.Internal, `maxEntries must be a positive integer: ${maxEntries}`);
  }
  // Invariant: every key of `expiries` has a heap entry carrying its map value. A released key leaves
  // its entry behind until that entry's expiry (re-consuming it adds another), so purging removes a key
  // only when the entry popped is the key's current one; the heap holds at most the keys consumed
  // within one memo lifetime.
  const expiries = new Map<string, number>();
  const heap: { key: string; expiresAtMs: number }[] = [];

  const purge = (now: number) => {
    for (let top = heap[0]; top !== undefined && top.expiresAtMs <= now; top = heap[0]) {
      popMin(heap);
      if (expiries.get(top.key) === top.expiresAtMs) expiries.delete(top.key);
    }
  };

  return {
    get size() {
      return expiries.size;
    },
    async consume(key, expiresAtMs) {
      const now = options.clock.now();
      purge(now);
      // Everything below is synchronous, so concurrent calls cannot interleave between check and set.
      if (!(expiresAtMs > now) || expiries.has(key)) return false;
      if (expiries.size >= maxEntries) {
        const earliest = heap[0]!.expiresAtMs;
        throw new TollgateError(ErrorCode.RateLimited, "replay guard is full of unexpired payments", {
          details: { maxEntries },
          retryAfter: Math.max(1, Math.ceil((earliest - now) / 1000)),
        });
      }
      expiries.set(key, expiresAtMs);
      push(heap, { key, expiresAtMs });
      return true;
    },
    async release(key) {
      expiries.delete(key);
    },
    async close() {
      expiries.clear();
      heap.length = 0;
    },
  };
}

type Entry = { key: string; expiresAtMs: number };

function push(heap: Entry[], entry: Entry): void {
  heap.push(entry);
  let i = heap.length - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent]!.expiresAtMs <= entry.expiresAtMs) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = entry;
}

function popMin(heap: Entry[]): void {
  const last = heap.pop();
  if (last === undefined || heap.length === 0) return;
  let i = 0;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child = right < heap.length && heap[right]!.expiresAtMs < heap[left]!.expiresAtMs ? right : left;
    if (heap[child]!.expiresAtMs >= last.expiresAtMs) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
}
