import { describe, expect, it } from "vitest";
import { forecastLookup } from "./forecastLookup.ts";

describe("forecastLookup", () => {
  it("answers calls per tool over the horizon, scaled by runs, and nothing for unplanned tools", () => {
    const lookup = forecastLookup(
      { summarize: 9, sentiment: 3 },
      { horizonSeconds: 2_592_000, runsPerHorizon: 30 },
    );
    expect(lookup("summarize")).toEqual({ calls: 270, horizonSeconds: 2_592_000 });
    expect(lookup("notarize")).toBeUndefined();
    expect(lookup("toString")).toBeUndefined();
  });

  it("reads the counts when asked, so a plan made later is seen", () => {
    const counts: Record<string, number> = {};
    const lookup = forecastLookup(() => counts, { horizonSeconds: 86_400 });
    expect(lookup("brief")).toBeUndefined();
    counts.brief = 2;
    expect(lookup("brief")).toEqual({ calls: 2, horizonSeconds: 86_400 });
  });

  it("refuses a horizon or run count that is not a positive integer", () => {
    expect(() => forecastLookup({}, { horizonSeconds: 0 })).toThrow(RangeError);
    expect(() => forecastLookup({}, { horizonSeconds: 60, runsPerHorizon: 0.5 })).toThrow(RangeError);
  });
});
