/**
 * The running estimate of how often an agent calls one plan (calls per second), learned online from
 * the calls it makes and a forecast used as a prior. A Gamma-Poisson model with forgetting:
 *
 * - Evidence is a pair (calls, exposure seconds), both decayed by `2^(−age / halfLife)`, so a call
 *   made one half-life ago counts half and the estimate follows demand that changes. Time passing
 *   without calls is evidence too: the exposure grows by `∫ 2^(−s/halfLife) ds` over the gap, so a tool
 *   no longer called sees its rate fall (what cancelling an unneeded subscription rests on).
 * - With a forecast, what is learned is the forecaster's bias, not a rate to replace it: beside the
 *   decayed calls the evidence keeps the decayed calls the forecasts in force expected (`expected`,
 *   the forecast's rate integrated over the same decayed time), and the estimate is the forecast's
 *   rate × `(calls + k) / (expected + k)` (`k` = CALIBRATION_CALLS pseudo-calls on each side, so a
 *   first call leaves the forecast nearly as it is). A forecast off by a constant factor still knows
 *   *when* demand changes (a ramp, a pause it was told of); scaled by its learned bias it keeps that
 *   timing, where a rate learned from calls alone lags every change by about a half-life.
 *   The bias has a Gamma posterior with shape `calls + k`: `rateLow` is one standard deviation under
 *   the mean (`1 − 1/√(calls + k)` of it), what a subscribe decision uses (waiting one more call costs
 *   one one-time price; a subscription taken on a forecast that was too high costs a period).
 * - Without a forecast the prior's rate is 0 with a fixed weight `baseWeight`: the estimate is then the
 *   decayed calls over the time observed plus `baseWeight`, which keeps a first call or a short burst
 *   from reading as a high rate.
 * - What was learned is not thrown away by a lull: beside the slow evidence the state keeps a fast
 *   one (`recent`, half-life RECENT_HALF_LIFE of the slow one) and the busy rate the calls alone read
 *   (`recall`, the highest estimate after a call, slowly forgotten). When the fast estimate shows
 *   demand back near that rate, a subscribe decision without a forecast takes the remembered rate
 *   (runningForecast.ts): the learned prior of rent-or-buy with predictions, where the slow estimate
 *   alone would relearn the rate against the quiet time's zero-call exposure.
 * - A rise shows in the fast estimate before the slow one reads it, and the fast estimate's weight is
 *   in its arrivals, not its calls: calls closer than `ARRIVAL_GAP_MS` to the one before are one
 *   arrival (a model turn's parallel calls, a loop's burst), so `recentArrivals` counts the
 *   independent pieces of evidence the fast rate rests on (runningForecast.ts takes it one standard
 *   deviation low, `1 − 1/√arrivals`, and only from `RISE_MIN_ARRIVALS` arrivals).
 *
 * Pure functions on a small plain state, so the same math runs in memory, in the store
 * (createDemandHistory) and in bench/policy.ts. Times are milliseconds, rates calls per second.
 *
 * Invariants: `calls ≥ 0`, `0 ≤ exposure ≤ halfLife / ln 2` (the limit of the decayed exposure),
 * `since ≤ at`: constant space however long a key is kept.
 */

/**
 * The evidence for one key: decayed calls and decayed seconds observed, as of `at` (ms), and the time
 * of the first call recorded (`since`, ms), from which the prior's weight decays.
 */
export type DemandState = {
  calls: number;
  exposure: number;
  at: number;
  since: number;
  /** Decayed calls the forecasts in force expected over the same time (0 or absent: none given). */
  expected?: number | undefined;
  /**
   * Calls and seconds observed decayed by the fast half-life (`RECENT_HALF_LIFE` of the slow one):
   * what demand does now, the evidence that it came back after a lull. Absent: 0.
   */
  recent?: number | undefined;
  recentExposure?: number | undefined;
  /**
   * The highest rate the calls alone have read (calls per second, the estimate without a forecast
   * after each call), forgotten with a half-life of `RECALL_HALF_LIVES` slow half-lives: what demand
   * was when it was busy. Absent: 0.
   */
  recall?: number | undefined;
  /**
   * Arrivals among the recent calls, decayed like `recent`: a call more than `ARRIVAL_GAP_MS` after
   * the one before starts a new arrival, a closer one belongs to the last. Absent: 0.
   */
  recentArrivals?: number | undefined;
};

/**
 * Calls closer than this to the call before are one arrival: a burst (a model turn's parallel calls,
 * a loop) is one piece of evidence about demand, not one per call. bench/policy.ts over the tuning
 * seeds 402,1,7,99,2026 (no-forecast row): 10 s against 1, 3, 30, 60, 300 and 3 600 s.
 */
export const ARRIVAL_GAP_MS = 10_000;

/**
 * The fast estimate's half-life as a share of the slow one (a sixteenth of a period by default); its
 * base weight is scaled alike. bench/policy.ts over seeds 402,1,7,99,2026: ¼ against ⅛ and ¹⁄₁₆.
 */
export const RECENT_HALF_LIFE = 1 / 4;
/**
 * How long a remembered busy rate lasts, in slow half-lives (16: it halves every four periods).
 * bench/policy.ts over the tuning seeds: 16 against 4 and 8.
 */
export const RECALL_HALF_LIVES = 16;

/**
 * Pseudo-calls on each side of the forecaster's bias (calls + k over expected + k): the bias starts
 * at 1 and moves once a few calls (or a few expected ones) are in. bench/policy.ts over seeds
 * 402,1,7,99,2026: 4 against 0.5, 1 and 2 (docs/policy.md).
 */
export const CALIBRATION_CALLS = 4;

/** How evidence is weighed, in seconds (both usually set from the plan's interval). */
export type DemandModel = {
  /** Evidence this old counts half. */
  halfLifeSeconds: number;
  /**
   * Without a forecast: seconds of exposure at rate 0 added to the evidence, for good (what keeps a
   * first call or a burst from reading as a high rate).
   */
  baseWeightSeconds: number;
};

/**
 * The default model for a plan of `intervalSeconds`: evidence halves every quarter period (a change of
 * demand shows well before the next renewal), and without a forecast an eighth of a period at rate 0
 * tempers the first calls. bench/policy.ts `--seeds 402,1,7,99,2026` chose the half-life: against a
 * whole period it lowers the measure, averaged over the seeds, from 1.157 to 1.141 on the first
 * bench's five patterns and from 1.130 to 1.122 on six (better on 7 of the 10 runs, and a narrower
 * spread; docs/policy.md).
 */
export function demandModelFor(intervalSeconds: number): DemandModel {
  return {
    halfLifeSeconds: intervalSeconds / 4,
    baseWeightSeconds: intervalSeconds / 8,
  };
}

const LN2 = Math.LN2;

function assertModel(model: DemandModel): void {
  if (!(model.halfLifeSeconds > 0) || !Number.isFinite(model.halfLifeSeconds)) {
    throw new RangeError("halfLifeSeconds must be a positive number");
  }
  if (!(model.baseWeightSeconds > 0) || !Number.isFinite(model.baseWeightSeconds)) {
    throw new RangeError("baseWeightSeconds must be a positive number");
  }
}

function assertRate(rate: number | undefined): void {
  if (rate !== undefined && (!(rate >= 0) || !Number.isFinite(rate))) {
    throw new RangeError("priorRate must be a non-negative number");
  }
}

/**
 * The state carried forward to `nowMs`: calls decay, and the seconds between count as observed, with
 * the calls the forecast in force now (`priorRate`, calls per second; none: 0) expected over them.
 * A clock that steps back leaves the state as it is (time never runs backwards for the evidence).
 */
export function decayDemand(
  state: DemandState,
  nowMs: number,
  model: DemandModel,
  priorRate?: number | undefined,
): DemandState {
  assertModel(model);
  assertRate(priorRate);
  const elapsed = (nowMs - state.at) / 1000;
  if (!(elapsed > 0)) return state;
  const h = model.halfLifeSeconds;
  const f = 2 ** (-elapsed / h);
  // ∫₀^elapsed 2^(−s/h) ds: the decayed seconds the gap adds.
  const grown = ((1 - f) * h) / LN2;
  const hr = h * RECENT_HALF_LIFE;
  const fr = 2 ** (-elapsed / hr);
  return {
    calls: state.calls * f,
    exposure: state.exposure * f + grown,
    at: nowMs,
    since: state.since,
    expected: (state.expected ?? 0) * f + (priorRate ?? 0) * grown,
    recent: (state.recent ?? 0) * fr,
    recentExposure: (state.recentExposure ?? 0) * fr + ((1 - fr) * hr) / LN2,
    recall: (state.recall ?? 0) * 2 ** (-elapsed / (h * RECALL_HALF_LIVES)),
    recentArrivals: (state.recentArrivals ?? 0) * fr,
  };
}

/**
 * The state after `count` calls at `nowMs` (a first call starts the evidence at `nowMs`), the time
 * since the last record expected at `priorRate` (the forecast in force; none: 0).
 */
export function recordDemand(
  state: DemandState | undefined,
  nowMs: number,
  model: DemandModel,
  count = 1,
  priorRate?: number | undefined,
): DemandState {
  if (!(count >= 0) || !Number.isFinite(count)) throw new RangeError("count must be a non-negative number");
  assertModel(model);
  const base =
    state === undefined
      ? {
          calls: 0,
          exposure: 0,
          at: nowMs,
          since: nowMs,
          expected: 0,
          recent: 0,
          recentExposure: 0,
          recall: 0,
          recentArrivals: 0,
        }
      : decayDemand(state, nowMs, model, priorRate);
  // A first call, or one more than ARRIVAL_GAP_MS after the last recorded, is a new arrival.
  const arrives = count > 0 && (state === undefined || nowMs - state.at > ARRIVAL_GAP_MS);
  const calls = base.calls + count;
  const rate = calls / (model.baseWeightSeconds + base.exposure);
  return {
    ...base,
    calls,
    recent: (base.recent ?? 0) + count,
    recentArrivals: (base.recentArrivals ?? 0) + (arrives ? 1 : 0),
    // Only a rate read once a quarter of the base weight's time has been observed is remembered: a
    // first call or a first burst reads high before time has passed beside it (bench/policy.ts: without
    // this, a first burst's rate taken back subscribed small workloads to dear plans, seed 7's worst
    // no-forecast workload 3.7 → 7.3 × the optimum; with the whole base weight the gain was gone).
    recall:
      base.exposure >= model.baseWeightSeconds / 4 ? Math.max(base.recall ?? 0, rate) : (base.recall ?? 0),
  };
}

export type DemandEstimate = {
  /** Posterior mean, calls per second. */
  rate: number;
  /**
   * One standard deviation under the mean (with a forecast: of its learned bias; without one, the
   * mean): what a subscribe decision takes, so a few calls confirm a forecast before it commits.
   */
  rateLow: number;
  /** With a forecast: the learned bias, calls made ÷ calls it expected (with the pseudo-calls). */
  bias: number | undefined;
  /** The prior's share of the estimate, 0…1 (1: no evidence yet). */
  priorShare: number;
  /** Decayed calls and seconds the evidence holds. */
  calls: number;
  exposure: number;
  /** The fast estimate's decayed calls and its rate (calls per second). */
  recentCalls: number;
  recentRate: number;
  /** The fast estimate's decayed arrivals (calls seconds apart counted once). */
  recentArrivals: number;
  /** The highest rate remembered (no forecast), calls per second. */
  recall: number;
};

/**
 * The rate at `nowMs`, combining the evidence with a prior rate (calls per second; omit it when there
 * is no forecast: the prior rate is then 0 and only its weight remains).
 */
export function estimateDemand(
  state: DemandState | undefined,
  nowMs: number,
  model: DemandModel,
  priorRate?: number | undefined,
): DemandEstimate {
  assertRate(priorRate);
  assertModel(model);
  const s =
    state === undefined
      ? {
          calls: 0,
          exposure: 0,
          since: nowMs,
          expected: 0,
          recent: 0,
          recentExposure: 0,
          recall: 0,
          recentArrivals: 0,
        }
      : decayDemand(state, nowMs, model, priorRate);
  const recentCalls = s.recent ?? 0;
  const recentRate = recentCalls / (model.baseWeightSeconds * RECENT_HALF_LIFE + (s.recentExposure ?? 0));
  const more = { recentCalls, recentRate, recentArrivals: s.recentArrivals ?? 0, recall: s.recall ?? 0 };
  if (priorRate !== undefined) {
    // The forecaster's bias: calls made over calls its forecasts expected, k pseudo-calls each side.
    const k = CALIBRATION_CALLS;
    const bias = (s.calls + k) / ((s.expected ?? 0) + k);
    const rate = priorRate * bias;
    return {
      rate,
      rateLow: rate * Math.max(0, 1 - 1 / Math.sqrt(s.calls + k)),
      bias,
      priorShare: k / (s.calls + k),
      calls: s.calls,
      exposure: s.exposure,
      ...more,
    };
  }
  const w = model.baseWeightSeconds;
  const rate = s.calls / (w + s.exposure);
  return {
    rate,
    rateLow: rate,
    bias: undefined,
    priorShare: w / (w + s.exposure),
    calls: s.calls,
    exposure: s.exposure,
    ...more,
  };
}
