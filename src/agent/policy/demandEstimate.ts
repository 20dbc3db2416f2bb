/**
 * The running estimate of how often an agent calls one plan (calls per second), learned online from
 * the calls it makes and a forecast used as a prior. A Gamma-Poisson model with forgetting:
 *
 * - Evidence is a pair (calls, exposure seconds), both decayed by `2^(−age / halfLife)`, so a call
 *   made one half-life ago counts half and the estimate follows demand that changes. Time passing
 *   without calls is evidence too: the exposure grows by `∫ 2^(−s/halfLife) ds` over the gap, so a tool
 *   no longer called sees its rate fall (what cancelling an unneeded subscription rests on).
 * - The prior (a forecast's rate, or none) counts as `w` seconds of exposure at that rate, where `w`
 *   starts at `priorWeight` with the first call and halves every half-life after it (the prior ages
 *   like evidence). The posterior mean is `(priorRate × w + calls) / (w + exposure)`: a forecast
 *   decides while the evidence is thin, and its share `w / (w + exposure)` falls as evidence arrives,
 *   so a forecast wrong by ×4 is corrected within about a plan period.
 * - Without a forecast the prior's rate is 0 with a fixed weight `baseWeight`: the estimate is then the
 *   decayed calls over the time observed plus `baseWeight`, which keeps a first call or a short burst
 *   from reading as a high rate.
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
export type DemandState = { calls: number; exposure: number; at: number; since: number };

/** How evidence is weighed, in seconds (both usually set from the plan's interval). */
export type DemandModel = {
  /** Evidence this old counts half. */
  halfLifeSeconds: number;
  /** Seconds of exposure a forecast counts as when the evidence begins (its weight then ages). */
  priorWeightSeconds: number;
  /**
   * Without a forecast: seconds of exposure at rate 0 added to the evidence, for good (what keeps a
   * first call or a burst from reading as a high rate).
   */
  baseWeightSeconds: number;
};

/**
 * The default model for a plan of `intervalSeconds`: evidence halves every quarter period (a change of
 * demand shows well before the next renewal), a forecast weighs as half a period of observation when
 * the evidence begins (and halves with the evidence), and without one an eighth of a period at rate 0
 * tempers the first calls. bench/policy.ts `--seeds 402,1,7,99,2026` chose the half-life: against a
 * whole period it lowers the measure, averaged over the seeds, from 1.157 to 1.141 on the first
 * bench's five patterns and from 1.130 to 1.122 on six (better on 7 of the 10 runs, and a narrower
 * spread; docs/policy.md).
 */
export function demandModelFor(intervalSeconds: number): DemandModel {
  return {
    halfLifeSeconds: intervalSeconds / 4,
    priorWeightSeconds: intervalSeconds / 2,
    baseWeightSeconds: intervalSeconds / 8,
  };
}

const LN2 = Math.LN2;

function assertModel(model: DemandModel): void {
  if (!(model.halfLifeSeconds > 0) || !Number.isFinite(model.halfLifeSeconds)) {
    throw new RangeError("halfLifeSeconds must be a positive number");
  }
  if (!(model.priorWeightSeconds > 0) || !Number.isFinite(model.priorWeightSeconds)) {
    throw new RangeError("priorWeightSeconds must be a positive number");
  }
  if (!(model.baseWeightSeconds > 0) || !Number.isFinite(model.baseWeightSeconds)) {
    throw new RangeError("baseWeightSeconds must be a positive number");
  }
}

/**
 * The state carried forward to `nowMs`: calls decay, and the seconds between count as observed.
 * A clock that steps back leaves the state as it is (time never runs backwards for the evidence).
 */
export function decayDemand(state: DemandState, nowMs: number, model: DemandModel): DemandState {
  assertModel(model);
  const elapsed = (nowMs - state.at) / 1000;
  if (!(elapsed > 0)) return state;
  const h = model.halfLifeSeconds;
  const f = 2 ** (-elapsed / h);
  return {
    calls: state.calls * f,
    // ∫₀^elapsed 2^(−s/h) ds, added to the old exposure decayed by f.
    exposure: state.exposure * f + ((1 - f) * h) / LN2,
    at: nowMs,
    since: state.since,
  };
}

/** The state after `count` calls at `nowMs` (a first call starts the evidence at `nowMs`). */
export function recordDemand(
  state: DemandState | undefined,
  nowMs: number,
  model: DemandModel,
  count = 1,
): DemandState {
  if (!(count >= 0) || !Number.isFinite(count)) throw new RangeError("count must be a non-negative number");
  assertModel(model);
  const base =
    state === undefined
      ? { calls: 0, exposure: 0, at: nowMs, since: nowMs }
      : decayDemand(state, nowMs, model);
  return { ...base, calls: base.calls + count };
}

export type DemandEstimate = {
  /** Posterior mean, calls per second. */
  rate: number;
  /** The prior's share of the estimate, 0…1 (1: no evidence yet). */
  priorShare: number;
  /** Decayed calls and seconds the evidence holds. */
  calls: number;
  exposure: number;
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
  if (priorRate !== undefined && (!(priorRate >= 0) || !Number.isFinite(priorRate))) {
    throw new RangeError("priorRate must be a non-negative number");
  }
  assertModel(model);
  const s = state === undefined ? { calls: 0, exposure: 0, since: nowMs } : decayDemand(state, nowMs, model);
  // The prior is old news too: its weight halves with every half-life since the evidence began, so a
  // wrong forecast stops mattering instead of keeping a fixed share of the decayed evidence.
  const age = Math.max(0, (nowMs - s.since) / 1000);
  const w =
    priorRate === undefined
      ? model.baseWeightSeconds
      : model.priorWeightSeconds * 2 ** (-age / model.halfLifeSeconds);
  const denominator = w + s.exposure;
  if (!(denominator > 0)) return { rate: priorRate ?? 0, priorShare: 1, calls: s.calls, exposure: 0 };
  return {
    rate: ((priorRate ?? 0) * w + s.calls) / denominator,
    priorShare: w / denominator,
    calls: s.calls,
    exposure: s.exposure,
  };
}
