/**
 * The running forecast: a plan's expected calls per period at the learned rate, in the form `decide()`
 * takes. The planner's forecast (or none) is the prior; the calls actually made correct it
 * (demandEstimate.ts has the model).
 */
import type { CallKey } from "./createCallCounter.ts";
import type { DemandHistory } from "./createDemandHistory.ts";
import type { PolicyForecast } from "./decide.ts";
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
 * The rate a forecast states, calls per second. Like `decide()`, a horizon shorter than the plan's
 * interval says nothing about the rest of the period: its calls are taken as the period's.
 */
export function forecastRate(forecast: PolicyForecast, intervalSeconds: number): number {
  return forecast.calls / Math.max(forecast.horizonSeconds, intervalSeconds);
}

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
  let callsPerPeriod = estimate.rate * intervalSeconds;
  if (input.prior === undefined)
    callsPerPeriod = Math.min(callsPerPeriod, EVIDENCE_MULTIPLE * estimate.calls);
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
  return runningForecast({
    state: recordDemand(record?.state, nowMs, model),
    nowMs,
    intervalSeconds: input.intervalSeconds,
    prior: input.prior,
    model,
  });
}
