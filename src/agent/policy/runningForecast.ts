/**
 * The running forecast: a plan's expected calls per period at the learned rate, in the form `decide()`
 * takes. The planner's forecast (or none) is the prior; the calls actually made correct it
 * (demandEstimate.ts has the model).
 */
import type { CallKey } from "./createCallCounter.ts";
import type { DemandHistory } from "./createDemandHistory.ts";
import { forecastRate, type PolicyForecast } from "./decide.ts";
import {
  type DemandEstimate,
  type DemandModel,
  type DemandState,
  demandModelFor,
  estimateDemand,
  recordDemand,
} from "./demandEstimate.ts";

/**
 * Without a forecast, the most calls per period the running forecast expects, as a multiple of the
 * (decayed) calls seen: so the first call subscribes only to a plan worth at most 4 one-time prices, and
 * in general the agent pays once for about a quarter of a plan's price before subscribing on evidence
 * alone. bench/policy.ts: 2 (the rent-or-buy half) cost 0.03 on the aggregate, none cost the worst
 * workload 6.6 × the optimum instead of 3.1.
 */
const EVIDENCE_MULTIPLE = 4;

/**
 * With a forecast, the most calls per period a subscribe decision expects, as a multiple of the
 * (decayed) calls seen: a forecast still commits the agent early (a plan worth up to 32 one-time prices
 * on its first call), but one that is too high cannot subscribe to a dear plan before its bias shows.
 * bench/policy.ts over seeds 402,1,7,99,2026: 8, 16, 32 and 64 against none (docs/policy.md).
 */
const FORECAST_EVIDENCE_MULTIPLE = 32;

/**
 * Without a forecast, demand is taken to be back at the busy rate it remembers (`recall`) when the
 * fast estimate holds at least RECALL_MIN_CALLS (decayed) calls and reads at least RECALL_SHARE of
 * that rate. bench/policy.ts over seeds 402,1,7,99,2026: a share of ¾ against ¼, ½ and 1.
 */
const RECALL_MIN_CALLS = 3;
const RECALL_SHARE = 0.75;

/**
 * Without a forecast, a rise is taken from the fast estimate (one standard deviation low, over its
 * arrivals) once it rests on this many (decayed) arrivals: with many calls a period, a short window
 * reads the rate well, and the slow estimate lags a rise by about its half-life. bench/policy.ts over
 * the tuning seeds 402,1,7,99,2026: 10 against 5 and 30 (no change), a standard deviation of ¾ to 1¼
 * (within 0.001), and counted in calls instead of arrivals 1.123 / 1.110 against 1.109 / 1.102 on the
 * no-forecast row (a burst read as a rise).
 */
const RISE_MIN_ARRIVALS = 10;

/** Forecasts are expressed over this many periods so that a fractional rate survives `calls: int`. */
const SCALE = 1000;

export type RunningForecast = {
  /** For `decide({ forecast })`: `callsPerPeriod` calls per plan interval (in thousandths). */
  forecast: PolicyForecast;
  /** Expected calls in one plan interval at the running rate. */
  callsPerPeriod: number;
  estimate: DemandEstimate;
};

/**
 * Expected calls per plan interval from the evidence (`state`) and the prior (`prior`, a planner's
 * forecast, optional), at `nowMs`.
 * @example
 * const { forecast } = runningForecast({ state: await demand.get(key), nowMs: clock.now(), intervalSeconds: plan.interval, prior });
 * const decision = decide({ offer, forecast, budget });
 */
export function runningForecast(input: {
  state: DemandState | undefined;
  nowMs: number;
  intervalSeconds: number;
  prior?: PolicyForecast | undefined;
  model?: DemandModel | undefined;
  /**
   * For a subscribe-or-pay-once decision: the forecast one standard deviation under the learned mean
   * (`rateLow`), so a forecast that may be too high is confirmed by a few calls paid once first. The
   * keep-or-cancel review takes the mean.
   */
  cautious?: boolean | undefined;
}): RunningForecast {
  const { intervalSeconds } = input;
  if (!Number.isSafeInteger(intervalSeconds) || intervalSeconds <= 0) {
    throw new RangeError("intervalSeconds must be a positive integer");
  }
  const model = input.model ?? demandModelFor(intervalSeconds);
  const priorRate = input.prior === undefined ? undefined : forecastRate(input.prior, intervalSeconds);
  const estimate = estimateDemand(input.state, input.nowMs, model, priorRate);
  // Without a forecast, never expect more than EVIDENCE_MULTIPLE times the calls actually seen
  // (decayed): a first call, or a first few, cannot commit the agent to a plan worth many of them.
  // With one, a subscribe decision (cautious) is held to FORECAST_EVIDENCE_MULTIPLE times them; the
  // keep-or-cancel review takes the learned mean as it is.
  let callsPerPeriod = (input.cautious === true ? estimate.rateLow : estimate.rate) * intervalSeconds;
  if (input.prior === undefined) {
    callsPerPeriod = Math.min(callsPerPeriod, EVIDENCE_MULTIPLE * estimate.calls);
    // A learned prior: when the calls of the last moments show demand back at the busy rate seen
    // before (after a lull, after a cancel), a subscribe decision takes that rate instead of
    // relearning it against the quiet time's evidence; held, like a forecast, to
    // FORECAST_EVIDENCE_MULTIPLE times the calls seen.
    if (
      input.cautious === true &&
      estimate.recall > 0 &&
      estimate.recentCalls >= RECALL_MIN_CALLS &&
      estimate.recentRate >= RECALL_SHARE * estimate.recall
    ) {
      callsPerPeriod = Math.max(
        callsPerPeriod,
        Math.min(estimate.recall * intervalSeconds, FORECAST_EVIDENCE_MULTIPLE * estimate.calls),
      );
    }
    // A rise the fast estimate shows on enough separate arrivals: taken one standard deviation low
    // (over the arrivals, so a burst's calls count once), held to the same multiple of the calls seen.
    if (input.cautious === true && estimate.recentArrivals >= RISE_MIN_ARRIVALS) {
      const low = estimate.recentRate * Math.max(0, 1 - 1 / Math.sqrt(estimate.recentArrivals));
      callsPerPeriod = Math.max(
        callsPerPeriod,
        Math.min(low * intervalSeconds, FORECAST_EVIDENCE_MULTIPLE * estimate.calls),
      );
    }
  } else if (input.cautious === true)
    callsPerPeriod = Math.min(callsPerPeriod, FORECAST_EVIDENCE_MULTIPLE * estimate.calls);
  return {
    forecast: {
      calls: Math.min(Number.MAX_SAFE_INTEGER, Math.round(callsPerPeriod * SCALE)),
      horizonSeconds: intervalSeconds * SCALE,
    },
    callsPerPeriod,
    estimate,
  };
}

/**
 * The running forecast for a call about to be made to `key`'s plan: the agent's learned demand with
 * this call included (not yet recorded: the paid tool records it once the call was made), and the
 * planner's forecast as prior.
 * @example
 * const { forecast, callsPerPeriod } = await learnedForecast(demand, { agent, provider, planId }, { intervalSeconds, prior });
 */
export async function learnedForecast(
  demand: DemandHistory,
  key: CallKey,
  input: { intervalSeconds: number; prior?: PolicyForecast | undefined },
): Promise<RunningForecast> {
  const nowMs = demand.now();
  const model = demandModelFor(input.intervalSeconds);
  const record = await demand.get(key);
  const priorRate = input.prior === undefined ? undefined : forecastRate(input.prior, input.intervalSeconds);
  return runningForecast({
    state: recordDemand(record?.state, nowMs, model, 1, priorRate),
    nowMs,
    intervalSeconds: input.intervalSeconds,
    prior: input.prior,
    model,
    cautious: true,
  });
}
