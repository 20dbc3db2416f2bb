import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { createCallCounter } from "./createCallCounter.ts";

const HOUR = 3600;
const key = { agent: "researcher", provider: "0xAbCdEf0000000000000000000000000000000001", planId: "3" };

describe("createCallCounter", () => {
  it("counts the calls of the last interval on the injected clock", () => {
    const clock = createFixedClock(1_000_000);
    const counter = createCallCounter({ clock });
    expect(counter.count(key, HOUR)).toBe(0);
    counter.record(key, HOUR);
    clock.advance(30 * 60_000);
    counter.record(key, HOUR);
    counter.record(key, HOUR);
    expect(counter.count(key, HOUR)).toBe(3);
    // The window is (now − interval, now]: the first call leaves it exactly one hour later.
    clock.set(1_000_000 + HOUR * 1000 - 1);
    expect(counter.count(key, HOUR)).toBe(3);
    clock.set(1_000_000 + HOUR * 1000);
    expect(counter.count(key, HOUR)).toBe(2);
    clock.advance(HOUR * 1000);
    expect(counter.count(key, HOUR)).toBe(0);
  });

  it("keeps agents, providers and plans apart, comparing providers case-insensitively", () => {
    const counter = createCallCounter({ clock: createFixedClock(0) });
    counter.record(key, HOUR);
    counter.record({ ...key, provider: key.provider.toLowerCase() }, HOUR);
    counter.record({ ...key, agent: "writer" }, HOUR);
    counter.record({ ...key, planId: "4" }, HOUR);
    counter.record({ agent: key.agent, provider: key.provider }, HOUR);
    expect(counter.count(key, HOUR)).toBe(2);
    expect(counter.count({ ...key, agent: "writer" }, HOUR)).toBe(1);
    expect(counter.count({ ...key, planId: "4" }, HOUR)).toBe(1);
    expect(counter.count({ agent: key.agent, provider: key.provider }, HOUR)).toBe(1);
  });

  it("answers for a shorter window from the calls kept for a longer one", () => {
    const clock = createFixedClock(0);
    const counter = createCallCounter({ clock });
    counter.record(key, 24 * HOUR);
    clock.advance(2 * HOUR * 1000);
    counter.record(key, 24 * HOUR);
    expect(counter.count(key, HOUR)).toBe(1);
    expect(counter.count(key, 24 * HOUR)).toBe(2);
  });

  it("forgets a key on request", () => {
    const counter = createCallCounter({ clock: createFixedClock(0) });
    counter.record(key, HOUR);
    counter.forget(key);
    expect(counter.count(key, HOUR)).toBe(0);
  });

  it("holds at most maxCallsPerKey calls per key", () => {
    const clock = createFixedClock(0);
    const counter = createCallCounter({ clock, maxCallsPerKey: 5 });
    for (let i = 0; i < 12; i += 1) {
      counter.record(key, HOUR);
      clock.advance(1);
    }
    expect(counter.count(key, HOUR)).toBe(5);
  });

  it("keeps counting a call recorded while the clock stepped back", () => {
    const clock = createFixedClock(HOUR * 1000 + 10);
    const counter = createCallCounter({ clock });
    counter.record(key, HOUR);
    clock.set(5);
    counter.record(key, HOUR); // counted as made at the latest time seen
    clock.set(HOUR * 1000 + 6);
    expect(counter.count(key, HOUR)).toBe(2);
  });

  it("refuses a non-positive interval", () => {
    const counter = createCallCounter({ clock: createFixedClock(0) });
    expect(() => counter.count(key, 0)).toThrow(RangeError);
    expect(() => counter.record(key, -1)).toThrow(RangeError);
    expect(() => createCallCounter({ clock: createFixedClock(0), maxCallsPerKey: 0 })).toThrow(RangeError);
  });
});
