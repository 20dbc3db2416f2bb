import type { Clock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import {
  checkClaimRequest,
  claimRequestHash,
  newClaimToken,
  type ReplayClaim,
  type ReplayClaimRequest,
  type ReplayGuard,
} from "./replayGuard.ts";

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
  const keys = new HeldKeys(maxEntries);

  // Every method below is synchronous after its first line, so concurrent calls cannot interleave
  // between a check and a set.
  return {
    get size() {
      return keys.held.size;
    },
    async consume(key, expiresAtMs) {
      const now = options.clock.now();
      keys.purge(now);
      if (!(expiresAtMs > now) || keys.held.has(key)) return false;
      keys.add(key, { expiresAtMs }, now);
      return true;
    },
    async claim(key, expiresAtMs, request) {
      checkClaimRequest(request);
      const now = options.clock.now();
      keys.purge(now);
      return claimHeld(keys, { key, expiresAtMs, request, now });
    },
    async settle(key, expiresAtMs) {
      const now = options.clock.now();
      keys.purge(now);
      const current = keys.held.get(key);
      if (current !== undefined) current.claim = undefined;
      else if (expiresAtMs > now) keys.add(key, { expiresAtMs }, now);
    },
    async release(key, token) {
      const current = keys.held.get(key);
      if (current !== undefined && current.claim?.token === token) keys.held.delete(key);
    },
    async close() {
      keys.clear();
    },
  };
}

/**
 * The keys held and their expiry heap.
 * Invariant: every key of `held` has a heap entry carrying its expiry. A released key leaves its entry
 * behind until that entry's expiry (re-consuming it adds another), so purging removes a key only when
 * the entry popped is the key's current one; the heap holds at most the keys consumed within one
 * memo lifetime.
 */
class HeldKeys {
  readonly held = new Map<string, Held>();
  private readonly heap: Entry[] = [];

  constructor(private readonly maxEntries: number) {}

  purge(now: number): void {
    const heap = this.heap;
    for (let top = heap[0]; top !== undefined && top.expiresAtMs <= now; top = heap[0]) {
      popMin(heap);
      if (this.held.get(top.key)?.expiresAtMs === top.expiresAtMs) this.held.delete(top.key);
    }
  }

  /** Remembers a new key; throws `RateLimited` when full (the caller checked it is not held). */
  add(key: string, entry: Held, now: number): void {
    if (this.held.size >= this.maxEntries) {
      const earliest = this.heap[0]!.expiresAtMs;
      throw new TollgateError(ErrorCode.RateLimited, "replay guard is full of unexpired payments", {
        details: { maxEntries: this.maxEntries },
        retryAfter: Math.max(1, Math.ceil((earliest - now) / 1000)),
      });
    }
    this.held.set(key, entry);
    push(this.heap, { key, expiresAtMs: entry.expiresAtMs });
  }

  clear(): void {
    this.held.clear();
    this.heap.length = 0;
  }
}

/** A claim on a key after purging: a new key is held under the claim; a held one is re-claimed only for the same request once its lease ran out. */
function claimHeld(
  keys: HeldKeys,
  {
    key,
    expiresAtMs,
    request,
    now,
  }: { key: string; expiresAtMs: number; request: ReplayClaimRequest; now: number },
): ReplayClaim {
  if (!(expiresAtMs > now)) return { ok: false, reason: "used" };
  const requestHash = claimRequestHash(request.request);
  const token = newClaimToken();
  const current = keys.held.get(key);
  if (current === undefined) {
    keys.add(
      key,
      { expiresAtMs, claim: { requestHash, token, leaseUntilMs: now + request.leaseMs, claims: 1 } },
      now,
    );
    return { ok: true, token };
  }
  const claim = current.claim;
  if (claim === undefined || claim.requestHash !== requestHash) return { ok: false, reason: "used" };
  if (claim.leaseUntilMs > now) {
    return { ok: false, reason: "in-flight", retryAfterMs: claim.leaseUntilMs - now };
  }
  if (claim.claims >= request.maxClaims) return { ok: false, reason: "used" };
  current.claim = { requestHash, token, leaseUntilMs: now + request.leaseMs, claims: claim.claims + 1 };
  return { ok: true, token };
}

/** A remembered key: used for good, or in flight under a claim. */
type Held = {
  expiresAtMs: number;
  claim?: { requestHash: string; token: string; leaseUntilMs: number; claims: number } | undefined;
};

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
