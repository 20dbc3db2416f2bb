import { describe, expect, it } from "vitest";
import { decide } from "./decide.ts";
import { decayDemand, demandModelFor, estimateDemand, recordDemand } from "./demandEstimate.ts";
import { runningForecast } from "./runningForecast.ts";

const DAY = 86_400;
const model = demandModelFor(DAY);
const T0 = 1_700_000_000_000;

/** Records `n` calls spread evenly over `seconds` from `fromMs`. */
function calls(state: Parameters<typeof recordDemand>[0], fromMs: number, n: number, seconds: number) {
  let s = state;
  for (let i = 0; i < n; i += 1) s = recordDemand(s, fromMs + (i * seconds * 1000) / n, model);
  return s!;
}

describe("demand estimate", () => {
  it("is the forecast before any call, with the prior's whole weight", () => {
    const e = estimateDemand(undefined, T0, model, 40 / DAY);
    expect(e.rate * DAY).toBeCloseTo(40);
    expect(e.priorShare).toBe(1);
  });

  it("halves evidence every quarter of the plan's period by default", () => {
    // bench/policy.ts over five seeds: a quarter period beat a whole one on both workload sets.
    expect(model).toEqual({
      halfLifeSeconds: DAY / 4,
      priorWeightSeconds: DAY / 2,
      baseWeightSeconds: DAY / 8,
    });
    const s = recordDemand(undefined, T0, model);
    expect(decayDemand(s, T0 + DAY * 1000, model).calls).toBeCloseTo(1 / 16);
  });

  it("decays calls by the half-life and counts the time between as observed", () => {
    const h = model.halfLifeSeconds;
    const s = recordDemand(undefined, T0, model);
    const later = decayDemand(s, T0 + h * 1000, model);
    expect(later.calls).toBeCloseTo(0.5);
    // ∫₀^h 2^(−s/h) ds = h / (2 ln 2)
    expect(later.exposure).toBeCloseTo(h / (2 * Math.LN2));
    expect(later.since).toBe(T0);
    // A clock stepping back leaves the evidence as it was.
    expect(decayDemand(later, T0, model)).toEqual(later);
  });

  it("corrects a forecast four times too high within a period, the prior's share falling as evidence arrives", () => {
    // Truth: 10 calls a day; the planner says 40.
    const prior = 40 / DAY;
    let state = calls(undefined, T0, 10, DAY);
    const afterOne = estimateDemand(state, T0 + DAY * 1000, model, prior);
    state = calls(state, T0 + DAY * 1000, 10, DAY);
    const afterTwo = estimateDemand(state, T0 + 2 * DAY * 1000, model, prior);
    expect(afterTwo.priorShare).toBeLessThan(afterOne.priorShare);
    expect(afterOne.rate * DAY).toBeLessThan(20);
    expect(afterTwo.rate * DAY).toBeGreaterThan(8);
    expect(afterTwo.rate * DAY).toBeLessThan(13);
  });

  it("corrects a forecast four times too low, and follows demand without one", () => {
    const s = calls(calls(undefined, T0, 40, DAY), T0 + DAY * 1000, 40, DAY);
    const low = estimateDemand(s, T0 + 2 * DAY * 1000, model, 10 / DAY);
    const none = estimateDemand(s, T0 + 2 * DAY * 1000, model);
    expect(low.rate * DAY).toBeGreaterThan(32);
    // Without a forecast the base weight (an eighth of a day at rate 0) stays beside the evidence, whose
    // exposure is at most h / ln 2 (0.36 day): a steady rate reads about three quarters of itself, the
    // price of not reading a first call or a burst as a rate.
    const seen = model.halfLifeSeconds / Math.LN2;
    const steady = (40 * seen) / (seen + model.baseWeightSeconds); // 29.7
    expect(Math.abs(none.rate * DAY - steady)).toBeLessThan(2);
    expect(none.rate * DAY).toBeGreaterThan(27);
    expect(none.rate * DAY).toBeLessThan(40);
  });

  it("does not read one call, or a burst, as a high rate without a forecast", () => {
    const one = estimateDemand(recordDemand(undefined, T0, model), T0, model);
    expect(one.rate * DAY).toBeCloseTo(8); // one call over an eighth of a day of base weight
    const burst = calls(undefined, T0, 20, 60);
    expect(estimateDemand(burst, T0 + 60_000, model).rate * DAY).toBeLessThan(170);
  });

  it("falls when the tool is no longer called", () => {
    const s = calls(undefined, T0, 100, DAY);
    const busy = estimateDemand(s, T0 + DAY * 1000, model).rate * DAY;
    const idle = estimateDemand(s, T0 + 4 * DAY * 1000, model).rate * DAY;
    expect(idle).toBeLessThan(busy / 4);
  });

  it("refuses nonsense", () => {
    expect(() => estimateDemand(undefined, T0, model, -1)).toThrow(RangeError);
    expect(() => recordDemand(undefined, T0, { ...model, halfLifeSeconds: 0 })).toThrow(RangeError);
    expect(() => recordDemand(undefined, T0, model, Number.NaN)).toThrow(RangeError);
  });
});

describe("decision with learning", () => {
  // One call costs 0.01; the plan 0.20 a day: it pays from 20 calls a day.
  const offer = {
    provider: "0x1111111111111111111111111111111111111111" as const,
    oneTime: { amount: 10_000n },
    subscription: { planId: "1", amount: 200_000n, interval: DAY },
  };

  it("pays once on a forecast four times too high once the calls made say so, subscribes when they are many", () => {
    const prior = { calls: 40, horizonSeconds: DAY };
    // Before evidence, the prior (40 a day) says subscribe.
    expect(
      decide({
        offer,
        forecast: runningForecast({ state: undefined, nowMs: T0, intervalSeconds: DAY, prior }).forecast,
      }).mode,
    ).toBe("subscribe");
    // Two days at 5 calls a day: pay once.
    const few = calls(calls(undefined, T0, 5, DAY), T0 + DAY * 1000, 5, DAY);
    const learned = runningForecast({ state: few, nowMs: T0 + 2 * DAY * 1000, intervalSeconds: DAY, prior });
    expect(learned.callsPerPeriod).toBeLessThan(10);
    const d = decide({ offer, forecast: learned.forecast });
    expect(d.mode).toBe("one-time");
    expect(d.basis).toBe("forecast");
    // Without a forecast, 60 calls in a day: subscribe.
    const many = calls(undefined, T0, 60, DAY);
    const busy = runningForecast({ state: many, nowMs: T0 + DAY * 1000, intervalSeconds: DAY });
    expect(decide({ offer, forecast: busy.forecast }).mode).toBe("subscribe");
  });
});
