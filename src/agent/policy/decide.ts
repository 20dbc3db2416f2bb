/**
 * The subscribe-or-pay-once policy (DESIGN.md §7). Pure: the same input always gives the same
 * decision, and every decision carries its reason and what each choice would have cost.
 *
 * Cost model, for the calls of one plan period:
 * - paying once: calls × one-time price;
 * - subscribing: the period price + overage, where overage = max(0, calls × unitsPerCall −
 *   includedUnits) × overageUnitPrice.
 *
 * With a forecast of `calls` in `horizonSeconds`, the calls of one period are
 * `calls × interval / horizonSeconds` when the horizon spans at least one period, and `calls` when it
 * is shorter (nothing is assumed about the rest of the period). The comparison is exact (rational,
 * in bigint); the cheaper choice wins, paying once on a tie (it commits to nothing).
 *
 * Without a forecast, the break-even rule: with `history` calls made in the last plan interval, this
 * call makes `history + 1`; subscribe when paying once for them would reach what the subscription
 * costs for them (the plan price, plus any overage), otherwise pay once. Within one period this is
 * the rent-or-buy rule: it spends less than twice the cheaper choice in hindsight. Count every call
 * in `history`, however it was paid (see `createCallCounter`): when a subscription lapses under steady
 * use, the count then renews it at once (bench/policy.ts measures the rule over many periods).
 *
 * Budget: a choice is open only when the budget report leaves room for its first payment (the
 * one-time price; the plan's period price, within the subscription commitment ceiling). When the
 * cheaper choice is not open the other is taken if it is; when neither is, the decision is `refuse`.
 */
import { z } from "zod";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { budgetHeadroom, type SpendTarget } from "../budget/budgetHeadroom.ts";
import type { BudgetReport } from "../budget/budgetReport.ts";
import { PolicyOfferSchema, type PolicyPlan } from "./policyOffer.ts";

/** Calls expected within a horizon, e.g. from a planner or from the agent's history. */
export const PolicyForecastSchema = z.strictObject({
  calls: z.int().nonnegative(),
  horizonSeconds: z.int().positive(),
});
export type PolicyForecast = z.infer<typeof PolicyForecastSchema>;

const BudgetReportSchema = z.custom<BudgetReport>(
  (value) => typeof value === "object" && value !== null && "remaining" in value && "limits" in value,
  { error: "expected a budget report from the ledger" },
);

export const PolicyInputSchema = z.strictObject({
  offer: PolicyOfferSchema,
  forecast: PolicyForecastSchema.optional(),
  /** Calls to this provider and plan made within the last plan interval, not counting this one. */
  history: z.int().nonnegative().optional(),
  /** The agent's budget report; without it no budget limit is considered. */
  budget: BudgetReportSchema.optional(),
  /** Metered units one call uses against the plan's allowance (default 1). */
  unitsPerCall: z.int().positive().default(1),
});
export type PolicyInput = z.input<typeof PolicyInputSchema>;

export type PolicyMode = "one-time" | "subscribe" | "refuse";

export type PolicyDecision = {
  mode: PolicyMode;
  /** One sentence for logs and for the model: why this choice. */
  reason: string;
  /** Which rule compared the choices. */
  basis: "forecast" | "break-even" | "single-option" | "no-option";
  /** What each choice costs for the calls considered (`undefined`: not offered), smallest units, rounded up. */
  costs: {
    oneTime: bigint | undefined;
    subscription: bigint | undefined;
    oneTimePrice: bigint | undefined;
    planPrice: bigint | undefined;
    /** The overage part of `subscription`. */
    overage: bigint | undefined;
    /** Calls of one plan period the costs are for (may be fractional with a forecast). */
    calls: number;
  };
  /** Largest spend the budget allows now for each choice; `undefined` when no limit applies. */
  available: { oneTime: bigint | undefined; subscription: bigint | undefined };
};

/** The narrow logger decisions are written to; a pino logger satisfies it. */
export type PolicyLogger = { info(obj: object, msg: string): void };

function usdc(amount: bigint): string {
  return `${formatUnitsExact(amount)} USDC`;
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** `2592000` → "30 days", `3600` → "1 hour", `90` → "90 seconds". */
export function describeInterval(seconds: number): string {
  const units: [number, string][] = [
    [86_400, "day"],
    [3_600, "hour"],
    [60, "minute"],
  ];
  for (const [size, name] of units) {
    if (seconds % size === 0) {
      const n = seconds / size;
      return `${n} ${name}${n === 1 ? "" : "s"}`;
    }
  }
  return `${seconds} second${seconds === 1 ? "" : "s"}`;
}

function describeCalls(num: bigint, den: bigint): string {
  const value = Number(num) / Number(den);
  const text = Number.isInteger(value) ? String(value) : value.toFixed(2).replace(/\.?0+$/, "");
  return `${text} call${value === 1 ? "" : "s"}`;
}

/** Room for a spend and the limit that sets it (`undefined`: no limit applies). */
function roomFor(report: BudgetReport | undefined, target: SpendTarget) {
  if (report === undefined) return undefined;
  let tightest: { room: bigint; limit: string } | undefined;
  for (const h of budgetHeadroom(report, target)) {
    if (tightest === undefined || h.room < tightest.room) tightest = { room: h.room, limit: h.limit };
  }
  return tightest;
}

function planText(plan: PolicyPlan): string {
  return `${usdc(plan.amount)} per ${describeInterval(plan.interval)}`;
}

/**
 * Decides how to pay for a gated call: once, by subscribing, or not at all.
 * @example
 * const { offer } = offerFromPaymentRequired(body)!;
 * const decision = decide({ offer, history: counter.count(key), budget: await ledger.report(agent) }, { logger });
 * if (decision.mode === "refuse") return `BudgetExceeded: ${decision.reason}`;
 */
export function decide(
  input: PolicyInput,
  options: { logger?: PolicyLogger | undefined } = {},
): PolicyDecision {
  const parsed = PolicyInputSchema.safeParse(input);
  if (!parsed.success) {
    throw new TollgateError(
      ErrorCode.InvalidRequest,
      `invalid policy input: ${parsed.error.issues[0]?.message}`,
      {
        details: { issues: parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })) },
      },
    );
  }
  const { offer, forecast, history, budget, unitsPerCall } = parsed.data;
  const plan = offer.subscription;
  const price = offer.oneTime?.amount;

  // Calls of one period as the rational num / den.
  let num: bigint;
  let den = 1n;
  if (forecast !== undefined) {
    num = BigInt(forecast.calls);
    if (plan !== undefined && forecast.horizonSeconds >= plan.interval) {
      num *= BigInt(plan.interval);
      den = BigInt(forecast.horizonSeconds);
    }
  } else {
    num = BigInt((history ?? 0) + 1);
  }
  const oneTimeScaled = price === undefined ? undefined : num * price;
  const overageScaled =
    plan === undefined
      ? undefined
      : (() => {
          const beyond = num * BigInt(unitsPerCall) - BigInt(plan.includedUnits) * den;
          return beyond > 0n ? beyond * plan.overageUnitPrice : 0n;
        })();
  const subscriptionScaled =
    plan === undefined || overageScaled === undefined ? undefined : plan.amount * den + overageScaled;

  const oneTimeRoom = roomFor(budget, { provider: offer.provider, kind: "one-time" });
  const subscriptionRoom = roomFor(budget, { provider: offer.provider, kind: "subscription" });
  const canPayOnce = price !== undefined && (oneTimeRoom === undefined || price <= oneTimeRoom.room);
  const canSubscribe =
    plan !== undefined && (subscriptionRoom === undefined || plan.amount <= subscriptionRoom.room);

  const costs: PolicyDecision["costs"] = {
    oneTime: oneTimeScaled === undefined ? undefined : ceilDiv(oneTimeScaled, den),
    subscription: subscriptionScaled === undefined ? undefined : ceilDiv(subscriptionScaled, den),
    oneTimePrice: price,
    planPrice: plan?.amount,
    overage: overageScaled === undefined ? undefined : ceilDiv(overageScaled, den),
    calls: Number(num) / Number(den),
  };
  const callsText = describeCalls(num, den);

  let basis: PolicyDecision["basis"];
  let preferred: "one-time" | "subscribe" | undefined;
  let why: string;
  if (oneTimeScaled !== undefined && subscriptionScaled !== undefined && plan !== undefined) {
    const subText = `subscribing (${planText(plan)}${costs.overage ? `, ${usdc(costs.overage)} overage` : ""})`;
    if (forecast !== undefined) {
      basis = "forecast";
      preferred = subscriptionScaled < oneTimeScaled ? "subscribe" : "one-time";
      why =
        preferred === "subscribe"
          ? `For the ${callsText} forecast per ${describeInterval(plan.interval)}, ${subText} costs ${usdc(costs.subscription!)}, less than paying once per call (${usdc(costs.oneTime!)})`
          : `For the ${callsText} forecast per ${describeInterval(plan.interval)}, paying once per call costs ${usdc(costs.oneTime!)}, no more than ${subText} at ${usdc(costs.subscription!)}`;
    } else {
      basis = "break-even";
      // "Would reach": the switch happens on the call whose one-time spend meets the subscription's cost.
      preferred = oneTimeScaled >= subscriptionScaled ? "subscribe" : "one-time";
      const recent = `the ${callsText} of the last ${describeInterval(plan.interval)} (this one included)`;
      why =
        preferred === "subscribe"
          ? `Paying once for ${recent} would cost ${usdc(costs.oneTime!)}, reaching the ${usdc(costs.subscription!)} that ${subText} costs for them`
          : `Paying once for ${recent} costs ${usdc(costs.oneTime!)}, below the ${usdc(costs.subscription!)} that ${subText} would cost`;
    }
  } else if (plan !== undefined) {
    basis = "single-option";
    preferred = "subscribe";
    why = `The offer can only be paid by subscribing (${planText(plan)})`;
  } else if (price !== undefined) {
    basis = "single-option";
    preferred = "one-time";
    why = `The offer has no subscription plan; one call costs ${usdc(price)}`;
  } else {
    basis = "no-option";
    preferred = undefined;
    why = "The offer has neither a one-time price nor a subscription plan";
  }

  const blocked = (mode: "one-time" | "subscribe"): string =>
    mode === "one-time"
      ? `paying once (${usdc(price!)}) exceeds the ${usdc(oneTimeRoom!.room)} the ${oneTimeRoom!.limit} limit leaves`
      : `subscribing (${usdc(plan!.amount)}) exceeds the ${usdc(subscriptionRoom!.room)} the ${subscriptionRoom!.limit} limit leaves`;
  const open = { "one-time": canPayOnce, subscribe: canSubscribe };
  const offered = { "one-time": price !== undefined, subscribe: plan !== undefined };

  let mode: PolicyMode;
  let reason: string;
  if (preferred === undefined) {
    mode = "refuse";
    reason = `${why}; nothing to pay.`;
  } else if (open[preferred]) {
    mode = preferred;
    reason = `${why}: ${preferred === "subscribe" ? "subscribe" : "pay once"}.`;
  } else {
    const other = preferred === "subscribe" ? "one-time" : "subscribe";
    if (offered[other] && open[other]) {
      mode = other;
      reason = `${why}, but ${blocked(preferred)}: ${other === "subscribe" ? "subscribe" : "pay once"} instead.`;
    } else {
      mode = "refuse";
      reason = offered[other]
        ? `Neither choice fits the budget: ${blocked(preferred)}, and ${blocked(other)}.`
        : `${why}, but ${blocked(preferred)}: refuse.`;
    }
  }
  if (
    forecast !== undefined &&
    mode === "one-time" &&
    oneTimeRoom !== undefined &&
    costs.oneTime! > oneTimeRoom.room
  ) {
    reason += ` The budget covers only ${oneTimeRoom.room / price!} of the forecast calls.`;
  }

  const decision: PolicyDecision = {
    mode,
    reason,
    basis,
    costs,
    available: { oneTime: oneTimeRoom?.room, subscription: subscriptionRoom?.room },
  };
  options.logger?.info(
    {
      provider: offer.provider,
      planId: plan?.planId,
      mode,
      basis,
      reason,
      costs: Object.fromEntries(
        Object.entries(costs).map(([k, v]) => [k, typeof v === "bigint" ? v.toString() : v]),
      ),
    },
    "policy decision",
  );
  return decision;
}
