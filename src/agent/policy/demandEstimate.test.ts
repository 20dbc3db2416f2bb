import { describe, expect, it } from "vitest";
import { decide } from "./decide.ts";
import {
  type DemandState,
  decayDemand,
  demandModelFor,
  estimateDemand,
  recordDemand,
} from "./demandEstimate.ts";
import { runningForecast } from "./runningForecast.ts";

const DAY = 86_400;
const model = demandModelFor(DAY);
const T0 = 1_700_000_000_000;

/** Records `n` calls spread evenly over `seconds` from `fromMs`, under a forecast of `priorRate`. */
function calls(
  state: Parameters<typeof recordDemand>[0],
  fromMs: number,
  n: number,
  seconds: number,
  priorRate?: number,
) {
  let s = state;
  for (let i = 0; i < n; i += 1) s = recordDemand(s, fromMs + (i * seconds * 1000) / n, model, 1, priorRate);
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
    expect(model).toEqual({ halfLifeSeconds: DAY / 4, baseWeightSeconds: DAY / 8 });
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

  it("learns the bias of a forecast four times too high: calls made over calls it expected", () => {
    // Truth: 40 calls a day; the planner says 160.
    const prior = 160 / DAY;
    const first = calls(undefined, T0, 5, DAY / 8, prior);
    const early = estimateDemand(first, T0 + (DAY * 1000) / 8, model, prior);
    let state = calls(first, T0 + (DAY * 1000) / 8, 35, (DAY * 7) / 8, prior);
    const afterOne = estimateDemand(state, T0 + DAY * 1000, model, prior);
    state = calls(state, T0 + DAY * 1000, 40, DAY, prior);
    const afterTwo = estimateDemand(state, T0 + 2 * DAY * 1000, model, prior);
    // The pseudo-calls' share falls as calls come in, and the bias moves towards ¼.
    expect(afterOne.priorShare).toBeLessThan(early.priorShare);
    expect(early.bias!).toBeLessThan(1);
    expect(afterOne.bias!).toBeLessThan(0.5);
    expect(afterTwo.bias!).toBeGreaterThan(0.25);
    expect(afterTwo.rate * DAY).toBeLessThan(80);
    expect(afterTwo.rate * DAY).toBeGreaterThan(40);
    // What a subscribe decision takes: a standard deviation of the bias lower.
    expect(afterTwo.rateLow).toBeLessThan(afterTwo.rate);
  });

  it("keeps the timing of a biased forecast: a drop it foresees shows at once, at its learned scale", () => {
    // The planner says 160 a day while the truth is 40, then says 16 (the truth drops to 4).
    const state = calls(undefined, T0, 80, 2 * DAY, 160 / DAY);
    const busy = estimateDemand(state, T0 + 2 * DAY * 1000, model, 160 / DAY);
    const quiet = estimateDemand(state, T0 + 2 * DAY * 1000, model, 16 / DAY);
    expect(quiet.rate / busy.rate).toBeCloseTo(0.1, 1);
    // From the calls alone, the drop would not show until they stop coming.
    expect(estimateDemand(state, T0 + 2 * DAY * 1000, model).rate * DAY).toBeGreaterThan(25);
  });

  it("corrects a forecast four times too low, and follows demand without one", () => {
    const s = calls(calls(undefined, T0, 40, DAY, 10 / DAY), T0 + DAY * 1000, 40, DAY, 10 / DAY);
    const low = estimateDemand(s, T0 + 2 * DAY * 1000, model, 10 / DAY);
    const none = estimateDemand(s, T0 + 2 * DAY * 1000, model);
    expect(low.rate * DAY).toBeGreaterThan(20);
    expect(low.bias!).toBeGreaterThan(2);
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

  it("counts calls seconds apart as one arrival, and calls further apart one each", () => {
    // 20 calls within a minute (3 s apart): one arrival, 20 recent calls.
    const burst = calls(undefined, T0, 20, 60);
    const b = estimateDemand(burst, T0 + 60_000, model);
    expect(b.recentArrivals).toBeCloseTo(1, 1);
    expect(b.recentCalls).toBeGreaterThan(19);
    // 20 calls a minute apart: 20 arrivals, decayed like the calls.
    const spread = calls(undefined, T0, 20, 1_200);
    const e = estimateDemand(spread, T0 + 1_200_000, model);
    expect(e.recentArrivals).toBeGreaterThan(15);
    expect(e.recentArrivals).toBeCloseTo(e.recentCalls, 6);
    // Arrivals decay with the recent calls.
    const later = estimateDemand(spread, T0 + 1_200_000 + (DAY * 1000) / 16, model);
    expect(later.recentArrivals).toBeCloseTo(e.recentArrivals / 2, 6);
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
    const rate = prior.calls / DAY;
    const few = calls(calls(undefined, T0, 5, DAY, rate), T0 + DAY * 1000, 5, DAY, rate);
    const learned = runningForecast({
      state: few,
      nowMs: T0 + 2 * DAY * 1000,
      intervalSeconds: DAY,
      prior,
      cautious: true,
    });
    expect(learned.callsPerPeriod).toBeLessThan(10);
    const d = decide({ offer, forecast: learned.forecast });
    expect(d.mode).toBe("one-time");
    expect(d.basis).toBe("forecast");
    // Without a forecast, 60 calls in a day: subscribe.
    const many = calls(undefined, T0, 60, DAY);
    const busy = runningForecast({ state: many, nowMs: T0 + DAY * 1000, intervalSeconds: DAY });
    expect(decide({ offer, forecast: busy.forecast }).mode).toBe("subscribe");
  });

  it("does not let a forecast subscribe a first call to a plan worth more than 32 one-time prices", () => {
    // The planner says 1 000 calls a day; a plan of 50 one-time prices pays from 50.
    const dear = { ...offer, subscription: { ...offer.subscription, amount: 500_000n } };
    const prior = { calls: 1_000, horizonSeconds: DAY };
    const first = recordDemand(undefined, T0, model, 1, prior.calls / DAY);
    const at = (state: typeof first, nowMs: number, cautious: boolean) =>
      runningForecast({ state, nowMs, intervalSeconds: DAY, prior, cautious });
    // For the subscribe decision the first call expects at most 32 calls a day: pay once.
    expect(at(first, T0, true).callsPerPeriod).toBeCloseTo(32);
    expect(decide({ offer: dear, forecast: at(first, T0, true).forecast }).mode).toBe("one-time");
    // The plan of 20 one-time prices is still taken on the forecast at once.
    expect(decide({ offer, forecast: at(first, T0, true).forecast }).mode).toBe("subscribe");
    // The review (the learned mean) is not capped.
    expect(at(first, T0, false).callsPerPeriod).toBeGreaterThan(900);
    // Two more calls within the hour: three allow 96 calls a day, and the dear plan is taken.
    const three = calls(first, T0 + 864_000, 2, 1_728, prior.calls / DAY);
    expect(at(three, T0 + 864_000 + 1_728_000, true).callsPerPeriod).toBeGreaterThan(50);
    expect(decide({ offer: dear, forecast: at(three, T0 + 864_000 + 1_728_000, true).forecast }).mode).toBe(
      "subscribe",
    );
  });

  it("subscribes again on the rate it remembers when demand comes back after a lull", () => {
    // 60 calls a day for a day, two quiet days, then 60 a day again: the plan pays from 20.
    const busy = calls(undefined, T0, 60, DAY);
    const back = T0 + 3 * DAY * 1000;
    const callsUntilSubscribed = (forget: boolean) => {
      let state: DemandState = busy;
      for (let n = 1; n <= 60; n += 1) {
        const nowMs = back + ((n - 1) * DAY * 1000) / 60;
        state = recordDemand(state, nowMs, model);
        const seen = forget ? { ...state, recall: 0 } : state;
        const { forecast } = runningForecast({ state: seen, nowMs, intervalSeconds: DAY, cautious: true });
        if (decide({ offer, forecast }).mode === "subscribe") return n;
      }
      return Number.POSITIVE_INFINITY;
    };
    const remembered = callsUntilSubscribed(false);
    const relearned = callsUntilSubscribed(true);
    // A first call back is not evidence enough; three in short order are.
    expect(remembered).toBeGreaterThan(1);
    expect(remembered).toBeLessThanOrEqual(4);
    expect(relearned).toBeGreaterThanOrEqual(8);
    expect(estimateDemand(busy, back, model).recall * DAY).toBeGreaterThan(25);
  });

  it("does not take a trickle after a lull for the busy rate it remembers", () => {
    // Back at 4 calls a day: far under the remembered rate, and the plan does not pay.
    let state: DemandState = calls(undefined, T0, 60, DAY);
    for (let n = 0; n < 8; n += 1) {
      const nowMs = T0 + 3 * DAY * 1000 + (n * DAY * 1000) / 4;
      state = recordDemand(state, nowMs, model);
      const { forecast } = runningForecast({ state, nowMs, intervalSeconds: DAY, cautious: true });
      expect(decide({ offer, forecast }).mode).toBe("one-time");
    }
  });

  describe("a rise without a forecast", () => {
    // A plan worth 600 one-time prices a day; two days at 60 calls a day before the rise.
    const dear = { ...offer, subscription: { ...offer.subscription, amount: 6_000_000n } };
    const before = calls(undefined, T0, 120, 2 * DAY);
    const rise = T0 + 2 * DAY * 1000;
    /** Calls of `times` until the policy subscribes (Infinity: never); `view` is what it decides on. */
    const callsUntilSubscribed = (times: number[], view: (s: DemandState) => DemandState = (s) => s) => {
      let state: DemandState = before;
      for (const [i, nowMs] of times.entries()) {
        state = recordDemand(state, nowMs, model);
        const { forecast } = runningForecast({
          state: view(state),
          nowMs,
          intervalSeconds: DAY,
          cautious: true,
        });
        if (decide({ offer: dear, forecast }).mode === "subscribe") return i + 1;
      }
      return Number.POSITIVE_INFINITY;
    };

    it("subscribes on the fast estimate once many separate calls show it, before the slow one reads it", () => {
      // 3 000 calls a day from the rise, one every 29 s.
      const steady = Array.from({ length: 1_000 }, (_, i) => rise + (i * DAY * 1000) / 3_000);
      const withRise = callsUntilSubscribed(steady);
      // The slow estimate alone (no arrivals seen) relearns the rate against two days at 60 a day.
      const slowOnly = callsUntilSubscribed(steady, (s) => ({ ...s, recentArrivals: 0 }));
      expect(withRise).toBeLessThan(120);
      expect(slowOnly).toBeGreaterThan(250);
      // One-time spend before subscribing: under a fifth of the plan, against over 40 % of it.
      expect(withRise * 10_000).toBeLessThan(6_000_000 / 5);
    });

    it("does not take one burst for a rise: its calls are one arrival", () => {
      // 100 calls 3 s apart after the two days at 60 a day.
      const burst = Array.from({ length: 100 }, (_, i) => rise + i * 3_000);
      expect(callsUntilSubscribed(burst)).toBe(Number.POSITIVE_INFINITY);
      // Counted in calls instead of arrivals, the burst would have read as a rise and subscribed.
      expect(callsUntilSubscribed(burst, (s) => ({ ...s, recentArrivals: s.recent }))).toBeLessThan(100);
    });
  });

  it("does not remember a first burst as a busy rate", () => {
    // 20 calls in a minute, then three more half an hour later: nothing seen long enough to remember
    // (a quarter of the base weight is 45 minutes for a daily plan).
    const burst = calls(undefined, T0, 20, 60);
    expect(estimateDemand(burst, T0 + 60_000, model).recall).toBe(0);
    const later = calls(burst, T0 + 1_800_000, 3, 60);
    expect(estimateDemand(later, T0 + 1_860_000, model).recall).toBe(0);
    const { forecast } = runningForecast({
      state: later,
      nowMs: T0 + 1_860_000,
      intervalSeconds: DAY,
      cautious: true,
    });
    // A plan worth 100 one-time prices is not taken on it.
    const dear = { ...offer, subscription: { ...offer.subscription, amount: 1_000_000n } };
    expect(decide({ offer: dear, forecast }).mode).toBe("one-time");
  });
});
