import { describe, expect, it } from "vitest";
import { capturingLogger } from "../../store/capturingLogger.ts";
import { createFeeHold } from "./feeHold.ts";

const GWEI = 1_000_000_000n;

describe("createFeeHold", () => {
  it("logs one warning when the first row waits and one line when the last stops, however many rows and rounds", () => {
    let now = 1_000;
    const { logger, lines } = capturingLogger();
    const hold = createFeeHold({ ceiling: 10n * GWEI, clock: { now: () => now }, logger });
    hold.hold(1, 100n * GWEI);
    now += 5_000;
    hold.hold(1, 100n * GWEI);
    hold.hold(2, 90n * GWEI);
    hold.hold(2, undefined);
    expect(hold.state()).toEqual({
      rows: 2,
      since: new Date(1_000),
      ceiling: 10n * GWEI,
      baseFee: 90n * GWEI,
    });
    hold.release(1);
    hold.release(7);
    expect(hold.state()?.rows).toBe(1);
    now += 1_000;
    hold.release(2);
    expect(hold.state()).toBeUndefined();
    expect(lines().map((l) => l.event)).toEqual(["fees.held", "fees.released"]);
    expect(lines()[1]).toMatchObject({ waitedMs: 6_000, rows: 2 });
    // A new episode is told again.
    hold.hold(3, 100n * GWEI);
    expect(lines().map((l) => l.event)).toEqual(["fees.held", "fees.released", "fees.held"]);
  });

  it("holds nothing without a maximum fee: a row then waits for a bump, not for the operator", () => {
    const { logger, lines } = capturingLogger();
    const hold = createFeeHold({ ceiling: undefined, clock: { now: () => 0 }, logger });
    hold.hold(1, 100n * GWEI);
    expect(hold.has(1)).toBe(false);
    expect(hold.state()).toBeUndefined();
    expect(lines()).toEqual([]);
  });
});
