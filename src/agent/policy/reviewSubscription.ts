/**
 * Keep or cancel a subscription before it renews: the policy's rule, pure. A subscription is
 * cancelled when the running forecast says its next period will not pay for itself:
 *
 *   expected one-time spend next period + the one-time spend of the calls still expected before the
 *   renewal  <  plan price + expected overage next period
 *
 * (cancelling is immediate and final on chain, so the calls left in the paid period would be paid
 * once: they count against cancelling). Only inside the cancel window, the last `lead` seconds before
 * the renewal is charged (`cancelLeadSeconds`): the period was paid for, and it is used until then.
 * Never after the renewal came due (the keeper may be charging it; the next period is decided before
 * the next renewal), never a subscription that is not Active (paused, past due or cancelled ones are
 * not renewed).
 *
 * Times: `chainTime` and `nextChargeAt` are chain seconds (renewals follow the chain's clock);
 * `nowMs` is the agent's clock, on which its demand evidence was recorded.
 */
import type { PolicyForecast } from "./decide.ts";
import { describeInterval } from "./decide.ts";
import type { DemandModel, DemandState } from "./demandEstimate.ts";
import { runningForecast } from "./runningForecast.ts";

/**
 * A subscription the agent holds, as the rule needs it. The facilitator's `GET /subscriptions/:id` and
 * `GET /plans/:id` give every field (`heldSubscriptionsFromFacilitator`); a store of the agent's
 * subscriptions can give the same.
 */
export type HeldSubscription = {
  subscriptionId: string;
  planId: string;
  provider: string;
  status: "Active" | "Paused" | "Cancelled" | "PastDue";
  /** Price of one period, smallest units. */
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
  /** Chain time (seconds) the next renewal is charged; null when none will be. */
  nextChargeAt: number | null;
};

export type SubscriptionReview = {
  subscriptionId: string;
  action: "keep" | "cancel";
  /** One sentence for logs and the report: why. */
  reason: string;
  /** Expected calls per period at the running rate (undefined: not estimated). */
  callsPerPeriod: number | undefined;
  /**
   * For a subscription kept because its cancel window has not opened: chain seconds until it opens,
   * when a watcher should look again (the window is `lead` long, so a look at most `lead` after this
   * still judges it before the renewal).
   */
  reviewInSeconds?: number | undefined;
};

/** The window before a renewal in which it may be cancelled: 5 % of the period, at most a day. */
export function cancelLeadSeconds(intervalSeconds: number): number {
  return Math.min(Math.ceil(intervalSeconds * 0.05), 86_400);
}

/** Fewer expected calls per period than this, with no one-time price to compare: not worth renewing. */
const IDLE_CALLS = 0.5;

function usdc(amount: number): string {
  return `${(amount / 1e6).toFixed(6).replace(/\.?0+$/, "")} USDC`;
}

function fmtCalls(calls: number): string {
  return calls >= 10 ? calls.toFixed(0) : calls.toFixed(2).replace(/\.?0+$/, "");
}

export function reviewSubscription(input: {
  subscription: HeldSubscription;
  /** The learned evidence for this plan (`DemandHistory.get`) and the one-time price last offered. */
  demand: { state: DemandState; oneTimePrice: bigint | undefined } | undefined;
  /** The planner's forecast for this plan, if any: the prior. */
  prior?: PolicyForecast | undefined;
  nowMs: number;
  chainTime: number;
  /** Default: `cancelLeadSeconds(interval)`. */
  leadSeconds?: number | undefined;
  model?: DemandModel | undefined;
}): SubscriptionReview {
  const { subscription: s, chainTime } = input;
  const keep = (reason: string, callsPerPeriod?: number): SubscriptionReview => ({
    subscriptionId: s.subscriptionId,
    action: "keep",
    reason,
    callsPerPeriod,
  });
  if (s.status !== "Active" || s.nextChargeAt === null) {
    return keep(`Subscription ${s.subscriptionId} is ${s.status}: no renewal to decide.`);
  }
  if (chainTime >= s.nextChargeAt) {
    return keep(
      `Subscription ${s.subscriptionId}'s renewal is already due: it is not cancelled now, the next one is decided before it comes due.`,
    );
  }
  const lead = input.leadSeconds ?? cancelLeadSeconds(s.interval);
  const left = s.nextChargeAt - chainTime;
  if (left > lead) {
    return {
      ...keep(
        `Subscription ${s.subscriptionId} is paid for another ${describeInterval(left)}: it is used until then and reviewed in the last ${describeInterval(lead)} before it renews.`,
      ),
      reviewInSeconds: left - lead,
    };
  }
  const { callsPerPeriod } = runningForecast({
    state: input.demand?.state,
    nowMs: input.nowMs,
    intervalSeconds: s.interval,
    prior: input.prior,
    model: input.model,
  });
  const callsLeft = (callsPerPeriod * left) / s.interval;
  const overage = Math.max(0, callsPerPeriod - s.includedUnits) * Number(s.overageUnitPrice);
  const subscriptionCost = Number(s.amount) + overage;
  const period = describeInterval(s.interval);
  const price = input.demand?.oneTimePrice;
  if (price === undefined) {
    if (callsPerPeriod < IDLE_CALLS) {
      return {
        subscriptionId: s.subscriptionId,
        action: "cancel",
        reason: `Subscription ${s.subscriptionId}: ${fmtCalls(callsPerPeriod)} calls expected per ${period} at the running rate, too few to renew it for ${usdc(Number(s.amount))}: cancel before it renews.`,
        callsPerPeriod,
      };
    }
    return keep(
      `Subscription ${s.subscriptionId}: ${fmtCalls(callsPerPeriod)} calls expected per ${period} and no one-time price to compare: renew.`,
      callsPerPeriod,
    );
  }
  const oneTimeNext = callsPerPeriod * Number(price);
  const oneTimeLeft = callsLeft * Number(price);
  const costs = `paying once would cost ${usdc(oneTimeNext)} next ${period}${callsLeft > 0.005 ? ` (and ${usdc(oneTimeLeft)} for the ${fmtCalls(callsLeft)} calls expected before the renewal)` : ""}, renewing ${usdc(subscriptionCost)}${overage > 0 ? ` with overage` : ""}`;
  if (oneTimeNext + oneTimeLeft < subscriptionCost) {
    return {
      subscriptionId: s.subscriptionId,
      action: "cancel",
      reason: `Subscription ${s.subscriptionId}: at the running rate of ${fmtCalls(callsPerPeriod)} calls per ${period}, ${costs}: cancel before it renews.`,
      callsPerPeriod,
    };
  }
  return keep(
    `Subscription ${s.subscriptionId}: at the running rate of ${fmtCalls(callsPerPeriod)} calls per ${period}, ${costs}: renew.`,
    callsPerPeriod,
  );
}
