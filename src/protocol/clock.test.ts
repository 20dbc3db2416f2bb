import { describe, expect, it } from "vitest";
import { createFixedClock, unixSeconds } from "./clock.ts";

describe("clocks", () => {
  it("stands still until moved and reports whole seconds", () => {
    const clock = createFixedClock(1_763_800_000_999);
    expect(unixSeconds(clock)).toBe(1_763_800_000);
    clock.advance(1);
    expect(unixSeconds(clock)).toBe(1_763_800_001);
    clock.set(0);
    expect(clock.now()).toBe(0);
  });
});
