import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { createSubscriptionStatusCache } from "./createSubscriptionStatusCache.ts";

const info = (status: SubscriptionInfo["status"]) => ({ subscriptionId: "1", status }) as SubscriptionInfo;

/** A reader whose answers the test releases one by one. */
function deferredReader() {
  const pending: { resolve(value: SubscriptionInfo): void; reject(error: unknown): void }[] = [];
  let reads = 0;
  return {
    get reads() {
      return reads;
    },
    read: () => {
      reads++;
      return new Promise<SubscriptionInfo>((resolve, reject) => pending.push({ resolve, reject }));
    },
    answer(value: SubscriptionInfo | Error) {
      const next = pending.shift()!;
      if (value instanceof Error) next.reject(value);
      else next.resolve(value);
    },
  };
}

describe("createSubscriptionStatusCache", () => {
  it("shares one read among concurrent misses and serves it until the TTL passes", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({ read: reader.read, clock, ttlMs: 5_000 });
    const both = Promise.all([cache.get("1"), cache.get("1")]);
    reader.answer(info("Active"));
    expect((await both).map((s) => s?.status)).toEqual(["Active", "Active"]);
    clock.advance(4_999);
    expect((await cache.get("1"))?.status).toBe("Active");
    expect(reader.reads).toBe(1);
    clock.advance(1);
    const again = cache.get("1");
    reader.answer(info("Paused"));
    expect((await again)?.status).toBe("Paused");
    expect(reader.reads).toBe(2);
  });

  it("does not cache a read that was in flight when the id was invalidated", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({ read: reader.read, clock });
    const stale = cache.get("1");
    cache.invalidate("1");
    const fresh = cache.get("1");
    reader.answer(info("Active")); // read before the change
    reader.answer(info("Paused")); // read after it
    expect((await stale)?.status).toBe("Active");
    expect((await fresh)?.status).toBe("Paused");
    expect((await cache.get("1"))?.status).toBe("Paused");
    expect(reader.reads).toBe(2);
  });

  it("caches an unknown id as undefined, and passes faults on without caching them", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({ read: reader.read, clock });
    const missing = cache.get("9");
    reader.answer(new TollgateError("NotFound", "no such subscription"));
    expect(await missing).toBeUndefined();
    expect(await cache.get("9")).toBeUndefined();
    const failing = cache.get("2");
    reader.answer(new TollgateError("ChainUnavailable", "down"));
    await expect(failing).rejects.toThrow(/down/);
    const retried = cache.get("2");
    reader.answer(info("Active"));
    expect((await retried)?.status).toBe("Active");
    expect(reader.reads).toBe(3);
  });

  it("re-reads an entry older than a tighter maxAgeMs", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({ read: reader.read, clock, ttlMs: 5_000 });
    const first = cache.get("1");
    reader.answer(info("Active"));
    await first;
    clock.advance(1_000);
    const tight = cache.get("1", { maxAgeMs: 1_000 });
    reader.answer(info("Active"));
    await tight;
    expect(reader.reads).toBe(2);
  });

  it("keeps Active states apart from unknown ids, so a flood of made-up ids cannot evict them", async () => {
    const clock = createFixedClock(0);
    let reads = 0;
    const cache = createSubscriptionStatusCache({
      read: async (id) => {
        reads++;
        if (id === "1") return info("Active");
        if (id === "2") return info("Cancelled");
        throw new TollgateError("NotFound", "no such subscription");
      },
      clock,
      maxEntries: 2,
      maxNegativeEntries: 3,
    });
    await cache.get("1");
    for (let i = 0; i < 50; i++) expect(await cache.get(String(1_000 + i))).toBeUndefined();
    expect(cache.size).toBe(1 + 3);
    const before = reads;
    expect((await cache.get("1"))?.status).toBe("Active");
    expect(reads).toBe(before);
    // An inactive subscription counts as a negative: it is bounded with them.
    await cache.get("2");
    expect(cache.size).toBe(1 + 3);
  });

  it("refreshes an Active entry ahead in the background, and never serves one past its TTL", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({
      read: reader.read,
      clock,
      ttlMs: 5_000,
      refreshAfterMs: 3_000,
    });
    const first = cache.get("1");
    reader.answer(info("Active"));
    await first;
    clock.advance(3_000);
    // Served at once from the cache, with one read started behind it (and only one).
    expect((await cache.get("1"))?.status).toBe("Active");
    clock.advance(500);
    expect((await cache.get("1"))?.status).toBe("Active");
    expect(reader.reads).toBe(2);
    // The background read has not answered when the entry expires: the caller waits for it.
    clock.advance(1_500);
    let settled = false;
    const late = cache.get("1").then((state) => {
      settled = true;
      return state;
    });
    await Promise.resolve();
    expect(settled).toBe(false);
    reader.answer(info("Paused"));
    expect((await late)?.status).toBe("Paused");
    expect(reader.reads).toBe(2);
  });

  it("keeps serving the entry until its TTL when a background refresh fails, then reads again", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({
      read: reader.read,
      clock,
      ttlMs: 5_000,
      refreshAfterMs: 3_000,
    });
    const first = cache.get("1");
    reader.answer(info("Active"));
    await first;
    clock.advance(3_000);
    expect((await cache.get("1"))?.status).toBe("Active");
    reader.answer(new Error("facilitator down"));
    await new Promise((resolve) => setImmediate(resolve));
    clock.advance(1_000);
    // One background attempt per entry: a failing facilitator is not asked again on every request.
    expect((await cache.get("1"))?.status).toBe("Active");
    expect(reader.reads).toBe(2);
    clock.advance(1_000);
    const expired = cache.get("1");
    reader.answer(new Error("down at expiry"));
    await expect(expired).rejects.toThrow("down at expiry");
  });

  it("does not refresh ahead what it refuses anyway: unknown ids cost one read per TTL", async () => {
    const clock = createFixedClock(0);
    const reader = deferredReader();
    const cache = createSubscriptionStatusCache({
      read: reader.read,
      clock,
      ttlMs: 5_000,
      refreshAfterMs: 3_000,
    });
    const first = cache.get("9");
    reader.answer(new TollgateError("NotFound", "no such subscription"));
    expect(await first).toBeUndefined();
    clock.advance(4_000);
    expect(await cache.get("9")).toBeUndefined();
    expect(reader.reads).toBe(1);
  });
});
