import { describe, expect, it } from "vitest";
import { createFixedClock } from "../protocol/clock.ts";
import { createTokenBuckets } from "./tokenBucket.ts";

const start = Date.UTC(2026, 10, 24, 12);

describe("createTokenBuckets", () => {
  it("lets a key spend its capacity at once, then refuses with the seconds until the next token", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 3, refillPerSecond: 0.5, clock });
    expect([1, 2, 3].map(() => buckets.take("a").ok)).toEqual([true, true, true]);
    expect(buckets.take("a")).toEqual({ ok: false, retryAfterSeconds: 2 });
  });

  it("refills at the configured rate and never above capacity", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 2, refillPerSecond: 1, clock });
    buckets.take("a");
    buckets.take("a");
    expect(buckets.take("a").ok).toBe(false);
    clock.advance(1_000);
    expect(buckets.take("a").ok).toBe(true);
    expect(buckets.take("a").ok).toBe(false);
    clock.advance(60_000);
    expect([1, 2, 3].map(() => buckets.take("a").ok)).toEqual([true, true, false]);
  });

  it("does not charge a refused request: waiting the announced time is enough", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 1, refillPerSecond: 0.25, clock });
    buckets.take("a");
    const refused = buckets.take("a");
    if (refused.ok) throw new Error("expected a refusal");
    expect(refused.retryAfterSeconds).toBe(4);
    for (let i = 0; i < 10; i++) buckets.take("a");
    clock.advance(refused.retryAfterSeconds * 1000);
    expect(buckets.take("a").ok).toBe(true);
  });

  it("keeps keys apart", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 1, refillPerSecond: 1, clock });
    expect(buckets.take("a").ok).toBe(true);
    expect(buckets.take("a").ok).toBe(false);
    expect(buckets.take("b").ok).toBe(true);
  });

  it("earns nothing when the clock steps back", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 1, refillPerSecond: 1, clock });
    buckets.take("a");
    clock.set(start - 3_600_000);
    expect(buckets.take("a").ok).toBe(false);
  });

  it("holds at most maxKeys buckets, dropping the least recently used", () => {
    const clock = createFixedClock(start);
    const buckets = createTokenBuckets({ capacity: 1, refillPerSecond: 0.001, clock, maxKeys: 2 });
    buckets.take("busy");
    buckets.take("idle");
    // "busy" is used again, so "idle" is now the least recently used and goes first.
    expect(buckets.take("busy").ok).toBe(false);
    buckets.take("new");
    expect(buckets.size).toBe(2);
    expect(buckets.take("busy").ok).toBe(false);
    expect(buckets.take("idle").ok).toBe(true);
  });

  it("refuses a rule that could never admit a request", () => {
    const clock = createFixedClock(start);
    expect(() => createTokenBuckets({ capacity: 0, refillPerSecond: 1, clock })).toThrow(/capacity/);
    expect(() => createTokenBuckets({ capacity: 1, refillPerSecond: 0, clock })).toThrow(/refill/);
  });
});
