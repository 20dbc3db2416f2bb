import { describe, expect, it } from "vitest";
import type { OfferListing } from "../../../agent/offerCheck.ts";
import { HeaderName } from "../../../protocol/header.ts";
import { listedUnitsPerCall, meteredCharge, readStatedCharge } from "./meteredCharge.ts";

const plan = { overageUnitPrice: 2_000n };
const headers = (units: string | undefined, charge: string | undefined) => {
  const h = new Headers();
  if (units !== undefined) h.set(HeaderName.Units, units);
  if (charge !== undefined) h.set(HeaderName.OverageCharge, charge);
  return h;
};

describe("readStatedCharge", () => {
  it("reads the units and the overage a gate states", () => {
    expect(readStatedCharge(headers("5", "6000"), plan)).toEqual({ units: 5, charge: 6_000n });
    expect(readStatedCharge(headers(" 5 ", "0"), plan)).toEqual({ units: 5, charge: 0n });
  });

  it("ignores a missing, malformed or inconsistent statement", () => {
    for (const [units, charge] of [
      [undefined, "6000"],
      ["5", undefined],
      ["-5", "6000"],
      ["5.0", "6000"],
      ["0x5", "6000"],
      ["5", "1e4"],
      ["99999999999", "0"],
      ["5", "6001"], // not a whole number of units' overage
      ["5", "12000"], // more than every unit's overage
    ] as const) {
      expect(readStatedCharge(headers(units, charge), plan)).toBeUndefined();
    }
    expect(readStatedCharge(headers("5", "1"), { overageUnitPrice: 0n })).toBeUndefined();
  });
});

describe("meteredCharge", () => {
  /** A meter with `included` units free at `perUnit` past them; `counted()` is its running total. */
  const meter = (perUnit: bigint, included: number) => {
    let used = 0;
    const count = (units: number) => {
      const before = Math.max(0, used - included);
      used += units;
      return perUnit * BigInt(Math.max(0, used - included) - before);
    };
    return { count, counted: () => used };
  };

  it("records the gate's charge when it is at least the tool's own count", () => {
    expect(meteredCharge({ units: 5, charge: 6_000n }, 5, meter(2_000n, 2).count)).toEqual({
      units: 5,
      charge: 6_000n,
      source: "gate",
    });
    // A tool without a listing counts 1 unit a call: the gate's 5 decide, and the meter counts all 5.
    const m = meter(2_000n, 2);
    expect(meteredCharge({ units: 5, charge: 6_000n }, 1, m.count).charge).toBe(6_000n);
    expect(m.counted()).toBe(5);
    expect(meteredCharge({ units: 5, charge: 10_000n }, 1, m.count).charge).toBe(10_000n);
  });

  it("never records less than the listed units per call give", () => {
    // Missing headers: the listing's 5 units.
    expect(meteredCharge(undefined, 5, meter(2_000n, 2).count)).toEqual({
      units: 5,
      charge: 6_000n,
      source: "listing",
    });
    // A seller stating 1 unit and nothing charged for a capability listed at 5.
    expect(meteredCharge({ units: 1, charge: 0n }, 5, meter(2_000n, 2).count)).toEqual({
      units: 5,
      charge: 6_000n,
      source: "listing",
    });
  });

  it("does not let a huge stated unit count inflate what is recorded", () => {
    const m = meter(2_000n, 2);
    expect(meteredCharge({ units: 1_000_000_000, charge: 0n }, 5, m.count).charge).toBe(6_000n);
    // Later calls are charged at most their listed units each.
    expect(meteredCharge(undefined, 5, m.count).charge).toBe(10_000n);
  });
});

describe("listedUnitsPerCall", () => {
  const listing = {
    pricing: [
      { type: "one-time", amount: "10000" },
      {
        type: "metered",
        planId: "7",
        amount: "50000",
        interval: 60,
        includedUnits: 2,
        overageUnitPrice: "2000",
        unitsPerCall: 5,
      },
    ],
  } as unknown as OfferListing;

  it("is the metered entry's units per call for the plan, else 1", () => {
    expect(listedUnitsPerCall(listing, "7")).toBe(5);
    expect(listedUnitsPerCall(listing, "8")).toBe(1);
    expect(listedUnitsPerCall(undefined, "7")).toBe(1);
  });
});
