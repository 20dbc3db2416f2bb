/**
 * The subscribe-or-pay-once policy (docs/policy.md). Pure: the same input always gives the same
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
 *
 * Channel (docs/policy.md "Channels"): a prepaid channel costs its calls at the channel price, plus
 * an open — one block's wait and gas the facilitator pays — and it locks a deposit until it is closed;
 * after the open every call is answered at once. So it pays off when many calls follow in a short
 * time: it is taken when the calls expected within `CHANNEL_HORIZON_SECONDS` (the forecast's rate, or
 * without one the calls of the last plan interval, this one included) reach `CHANNEL_MIN_CALLS`, its
 * cost for the calls considered is no more than the cheaper other choice's, and the budget can hold a
 * deposit of at least `max(minDeposit, price)`. The deposit is sized for the expected calls (without a
 * forecast `EVIDENCE_MULTIPLE` times those seen) and a third more (the wallet renews a channel when a
 * quarter is left), at least the gate's minimum, capped by what the
 * per-provider, daily and total limits leave, in whole calls. A channel that is the only offer is taken
 * whenever its deposit fits.
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

/**
 * The rate a forecast states, calls per second. As in `decide()`, a horizon shorter than the plan's
 * interval says nothing about the rest of the period: its calls are taken as the period's.
 */
export function forecastRate(forecast: PolicyForecast, intervalSeconds: number): number {
  return forecast.calls / Math.max(forecast.horizonSeconds, intervalSeconds);
}

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
  /**
   * What the sale reservation this purchase draws from still holds (a reseller's purchase for a sale
   * it admitted, src/agent/saleAdmission.ts). The budget report counts that reservation as spoken
   * for, so a one-time payment's total and daily room is this instead; the per-call and per-provider
   * limits still apply. A subscription is the spender's own, outside the sale: the report decides it.
   */
  sale: z.bigint().nonnegative().optional(),
  /**
   * With `sale`: the reservation is the part of the sale set aside for this provider at admission, so
   * its per-provider limit was met then (the draw leaves that limit's use unchanged): only the per-call
   * limit and what the part holds bound the payment.
   */
  saleForProvider: z.boolean().optional(),
  /**
   * The shortest plan interval the agent subscribes to, in seconds: how often its subscription keeper
   * looks (default 60, the watcher's). A plan that renews faster is not subscribed to.
   */
  minPlanIntervalSeconds: z.int().positive().default(60),
});
export type PolicyInput = z.input<typeof PolicyInputSchema>;

export type PolicyMode = "one-time" | "subscribe" | "channel" | "refuse";

/** Calls within the channel horizon from which a channel pays off (its open waits one block). */
export const CHANNEL_MIN_CALLS = 3;
/** "A short time": the window the channel rule counts expected calls in, seconds. */
export const CHANNEL_HORIZON_SECONDS = 3_600;
/** Without a forecast, a channel's deposit covers this many times the calls seen. */
const EVIDENCE_MULTIPLE = 4;
/**
 * A channel wallet opens the next channel when a quarter of the deposit is left (`renewBelow`): a
 * deposit of the expected calls × 4/3 serves them all on one channel, with no second open.
 */
const RENEW_HEADROOM = 4 / 3;

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
    /** What the calls considered cost by channel (vouchers at the channel price). */
    channel?: bigint | undefined;
    channelPrice?: bigint | undefined;
  };
  /** Largest spend the budget allows now for each choice; `undefined` when no limit applies. */
  available: {
    oneTime: bigint | undefined;
    subscription: bigint | undefined;
    /** Largest deposit the budget can hold for a channel. */
    channel?: bigint | undefined;
  };
  /** With `mode: "channel"`: the deposit to open the channel with (a budget commitment). */
  deposit?: bigint | undefined;
  /** Calls expected within the channel horizon (what the channel rule weighed). */
  burstCalls?: number | undefined;
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
function roomFor(report: BudgetReport | undefined, target: SpendTarget, skip?: string) {
  if (report === undefined) return undefined;
  let tightest: { room: bigint; limit: string } | undefined;
  for (const h of budgetHeadroom(report, target)) {
    if (h.limit === skip) continue;
    if (tightest === undefined || h.room < tightest.room) tightest = { room: h.room, limit: h.limit };
  }
  return tightest;
}

/**
 * Room for a purchase drawn from a sale reservation holding `held`: the sale bounds it instead of the
 * total and daily limits (the draw leaves their use unchanged); per-call and per-provider still apply.
 */
function saleRoomFor(
  report: BudgetReport | undefined,
  target: SpendTarget,
  held: bigint,
  forProvider: boolean,
  skip?: string,
) {
  let tightest = { room: held, limit: "sale" };
  for (const h of report === undefined ? [] : budgetHeadroom(report, target)) {
    if (h.limit === "total" || h.limit === "daily" || h.limit === skip) continue;
    if (forProvider && h.limit === "perProvider") continue;
    if (h.room < tightest.room) tightest = { room: h.room, limit: h.limit };
  }
  return tightest;
}

function planText(plan: PolicyPlan): string {
  return `${usdc(plan.amount)} per ${describeInterval(plan.interval)}`;
}

/** The largest deposit the budget can hold for a channel to `provider` (holds skip the per-call limit). */
function depositRoom(report: BudgetReport | undefined, provider: string) {
  if (report === undefined) return undefined;
  let tightest: { room: bigint; limit: string } | undefined;
  for (const h of budgetHeadroom(report, { provider, kind: "metered" })) {
    if (h.limit === "perCall") continue;
    if (tightest === undefined || h.room < tightest.room) tightest = { room: h.room, limit: h.limit };
  }
  return tightest;
}

/** Turns a one-time/subscribe/refuse decision into a channel one when a channel pays off (see above). */
function weighChannel(
  decision: PolicyDecision,
  input: {
    channel: { amount: bigint; minDeposit: bigint };
    budget: BudgetReport | undefined;
    provider: string;
    forecast: PolicyForecast | undefined;
    history: number | undefined;
    num: bigint;
    den: bigint;
    costScaled: bigint | undefined;
    onlyChannel: boolean;
  },
): void {
  const { channel, forecast } = input;
  const price = channel.amount;
  const burst =
    forecast !== undefined
      ? forecast.calls * Math.min(1, CHANNEL_HORIZON_SECONDS / forecast.horizonSeconds)
      : (input.history ?? 0) + 1;
  const depositCalls = Math.max(
    1,
    Math.ceil((forecast !== undefined ? burst : burst * EVIDENCE_MULTIPLE) * RENEW_HEADROOM - 1e-9),
  );
  // biome-ignore lint/complexity/useMathMinMax: bigints; Math.max throws on them
  const smallest = channel.minDeposit > price ? channel.minDeposit : price;
  let deposit = price * BigInt(Math.min(depositCalls, Number.MAX_SAFE_INTEGER));
  if (deposit < smallest) deposit = smallest;
  const room = depositRoom(input.budget, input.provider);
  let capped = false;
  if (room !== undefined && deposit > room.room) {
    deposit = room.room - (room.room % price);
    capped = true;
  }
  const fits = deposit >= smallest;
  const channelScaled = input.num * price;
  decision.costs.channel = ceilDiv(channelScaled, input.den);
  decision.costs.channelPrice = price;
  decision.available.channel = room?.room;
  decision.burstCalls = burst;
  const burstText = `${Number.isInteger(burst) ? burst : burst.toFixed(2)} calls expected within ${describeInterval(CHANNEL_HORIZON_SECONDS)}`;
  const cheapEnough = input.costScaled === undefined || channelScaled <= input.costScaled;
  const worth = input.onlyChannel || (burst >= CHANNEL_MIN_CALLS && cheapEnough);
  const depositText = `a deposit of ${usdc(deposit)}${capped ? ` (all the ${room!.limit} limit leaves, in whole calls)` : ""}`;
  if (worth && fits) {
    const compared =
      input.onlyChannel || input.costScaled === undefined
        ? "the offer's only choice"
        : `${usdc(decision.costs.channel)} for the calls considered, no more than the ${decision.mode === "subscribe" ? "subscription" : "one-time"} choice's ${usdc(ceilDiv(input.costScaled, input.den))}`;
    decision.mode = "channel";
    decision.deposit = deposit;
    decision.basis = input.onlyChannel ? "single-option" : decision.basis;
    decision.reason = `With ${burstText}, a prepaid channel at ${usdc(price)} per call (${compared}; one open, then no block wait per call) pays off: open one with ${depositText}.`;
    return;
  }
  if (worth && !fits && room !== undefined) {
    const note = `a channel needs a deposit of at least ${usdc(smallest)}, above the ${usdc(room.room)} the ${room.limit} limit leaves`;
    decision.reason =
      decision.mode === "refuse"
        ? `Neither choice fits the budget: ${note}.`
        : `${decision.reason} (${note}.)`;
    return;
  }
  if (decision.mode !== "refuse") {
    decision.reason = `${decision.reason} (A channel is not worth its open and deposit: ${burstText}${cheapEnough ? "" : ", and it costs more"}.)`;
  }
}

type ParsedPolicyInput = z.output<typeof PolicyInputSchema>;
type OfferPlan = ParsedPolicyInput["offer"]["subscription"];
type Room = { room: bigint; limit: string } | undefined;

/**
 * What `decide()` weighs: the calls of one period as the rational `num / den`, each choice's cost for
 * them scaled by `den` (exact), the budget's room for each choice's first payment, and whether it is open.
 */
type Weighing = {
  input: ParsedPolicyInput;
  plan: OfferPlan;
  price: bigint | undefined;
  num: bigint;
  den: bigint;
  oneTimeScaled: bigint | undefined;
  subscriptionScaled: bigint | undefined;
  oneTimeRoom: Room;
  /**
   * Room for all the forecast calls paid once: the limits that bound calls together (the per-call limit
   * bounds each call alone, so it says nothing of how many fit).
   */
  forecastRoom: Room;
  subscriptionRoom: Room;
  canPayOnce: boolean;
  canSubscribe: boolean;
  tooFrequent: boolean;
  costs: PolicyDecision["costs"];
};

/** Which rule compared the choices, the cheaper choice by it, and why in words. */
type Preference = {
  basis: PolicyDecision["basis"];
  preferred: "one-time" | "subscribe" | undefined;
  why: string;
};

function parsePolicyInput(input: PolicyInput): ParsedPolicyInput {
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
  return parsed.data;
}

/** Calls of one period as the rational num / den: the forecast's, scaled to the period, or history's and this one. */
function periodCalls(
  forecast: PolicyForecast | undefined,
  history: number | undefined,
  plan: OfferPlan,
): { num: bigint; den: bigint } {
  if (forecast === undefined) return { num: BigInt((history ?? 0) + 1), den: 1n };
  let num = BigInt(forecast.calls);
  let den = 1n;
  if (plan !== undefined && forecast.horizonSeconds >= plan.interval) {
    num *= BigInt(plan.interval);
    den = BigInt(forecast.horizonSeconds);
  }
  return { num, den };
}

/** Each choice's cost for the period's calls, and the budget's room for its first payment. */
function weigh(input: ParsedPolicyInput): Weighing {
  const { offer, budget, unitsPerCall, sale, saleForProvider, minPlanIntervalSeconds } = input;
  const plan = offer.subscription;
  const price = offer.oneTime?.amount;
  const { num, den } = periodCalls(input.forecast, input.history, plan);
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

  const oneTimeTarget = { provider: offer.provider, kind: "one-time" } as const;
  const oneTimeRoom =
    sale === undefined
      ? roomFor(budget, oneTimeTarget)
      : saleRoomFor(budget, oneTimeTarget, sale, saleForProvider === true);
  const forecastRoom =
    sale === undefined
      ? roomFor(budget, oneTimeTarget, "perCall")
      : saleRoomFor(budget, oneTimeTarget, sale, saleForProvider === true, "perCall");
  const subscriptionRoom = roomFor(budget, { provider: offer.provider, kind: "subscription" });
  const canPayOnce = price !== undefined && (oneTimeRoom === undefined || price <= oneTimeRoom.room);
  const tooFrequent = plan !== undefined && plan.interval < minPlanIntervalSeconds;
  const canSubscribe =
    plan !== undefined &&
    !tooFrequent &&
    (subscriptionRoom === undefined || plan.amount <= subscriptionRoom.room);

  const costs: PolicyDecision["costs"] = {
    oneTime: oneTimeScaled === undefined ? undefined : ceilDiv(oneTimeScaled, den),
    subscription: subscriptionScaled === undefined ? undefined : ceilDiv(subscriptionScaled, den),
    oneTimePrice: price,
    planPrice: plan?.amount,
    overage: overageScaled === undefined ? undefined : ceilDiv(overageScaled, den),
    calls: Number(num) / Number(den),
  };
  return {
    input,
    plan,
    price,
    num,
    den,
    oneTimeScaled,
    subscriptionScaled,
    oneTimeRoom,
    forecastRoom,
    subscriptionRoom,
    canPayOnce,
    canSubscribe,
    tooFrequent,
    costs,
  };
}

/** The cheaper choice by the forecast or the break-even rule, or the only one offered. */
function preferenceOf(w: Weighing): Preference {
  const { plan, price, costs, oneTimeScaled, subscriptionScaled } = w;
  const { forecast } = w.input;
  const callsText = describeCalls(w.num, w.den);
  if (oneTimeScaled !== undefined && subscriptionScaled !== undefined && plan !== undefined) {
    const subText = `subscribing (${planText(plan)}${costs.overage ? `, ${usdc(costs.overage)} overage` : ""})`;
    if (forecast !== undefined) {
      const preferred = subscriptionScaled < oneTimeScaled ? "subscribe" : "one-time";
      const why =
        preferred === "subscribe"
          ? `For the ${callsText} forecast per ${describeInterval(plan.interval)}, ${subText} costs ${usdc(costs.subscription!)}, less than paying once per call (${usdc(costs.oneTime!)})`
          : `For the ${callsText} forecast per ${describeInterval(plan.interval)}, paying once per call costs ${usdc(costs.oneTime!)}, no more than ${subText} at ${usdc(costs.subscription!)}`;
      return { basis: "forecast", preferred, why };
    }
    // "Would reach": the switch happens on the call whose one-time spend meets the subscription's cost.
    const preferred = oneTimeScaled >= subscriptionScaled ? "subscribe" : "one-time";
    const recent = `the ${callsText} of the last ${describeInterval(plan.interval)} (this one included)`;
    const why =
      preferred === "subscribe"
        ? `Paying once for ${recent} would cost ${usdc(costs.oneTime!)}, reaching the ${usdc(costs.subscription!)} that ${subText} costs for them`
        : `Paying once for ${recent} costs ${usdc(costs.oneTime!)}, below the ${usdc(costs.subscription!)} that ${subText} would cost`;
    return { basis: "break-even", preferred, why };
  }
  if (plan !== undefined) {
    return {
      basis: "single-option",
      preferred: "subscribe",
      why: `The offer can only be paid by subscribing (${planText(plan)})`,
    };
  }
  if (price !== undefined) {
    return {
      basis: "single-option",
      preferred: "one-time",
      why: `The offer has no subscription plan; one call costs ${usdc(price)}`,
    };
  }
  return {
    basis: "no-option",
    preferred: undefined,
    why: "The offer has neither a one-time price nor a subscription plan",
  };
}

/** Why the budget (or the keeper's pace) keeps `mode` closed. */
function blockedText(w: Weighing, mode: "one-time" | "subscribe"): string {
  const { price, plan, oneTimeRoom, subscriptionRoom } = w;
  return mode === "one-time"
    ? `paying once (${usdc(price!)}) exceeds the ${usdc(oneTimeRoom!.room)} the ${oneTimeRoom!.limit === "sale" ? "sale reservation" : `${oneTimeRoom!.limit} limit`} leaves`
    : w.tooFrequent
      ? `the plan renews every ${describeInterval(plan!.interval)}, more often than the budget's keeper looks (every ${describeInterval(w.input.minPlanIntervalSeconds)})`
      : `subscribing (${usdc(plan!.amount)}) exceeds the ${usdc(subscriptionRoom!.room)} the ${subscriptionRoom!.limit} limit leaves`;
}

/** The preferred choice when the budget leaves it open, else the other if open, else refuse; with its reason. */
function chooseMode(w: Weighing, { preferred, why }: Preference): { mode: PolicyMode; reason: string } {
  const open = { "one-time": w.canPayOnce, subscribe: w.canSubscribe };
  const offered = { "one-time": w.price !== undefined, subscribe: w.plan !== undefined };
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
      reason = `${why}, but ${blockedText(w, preferred)}: ${other === "subscribe" ? "subscribe" : "pay once"} instead.`;
    } else {
      mode = "refuse";
      reason = offered[other]
        ? `Neither choice fits the budget: ${blockedText(w, preferred)}, and ${blockedText(w, other)}.`
        : `${why}, but ${blockedText(w, preferred)}: refuse.`;
    }
  }
  if (
    w.input.forecast !== undefined &&
    mode === "one-time" &&
    w.forecastRoom !== undefined &&
    w.costs.oneTime! > w.forecastRoom.room
  ) {
    reason += ` The budget covers only ${w.forecastRoom.room / w.price!} of the forecast calls.`;
  }
  return { mode, reason };
}

function logDecision(logger: PolicyLogger | undefined, w: Weighing, decision: PolicyDecision): void {
  logger?.info(
    {
      provider: w.input.offer.provider,
      planId: w.plan?.planId,
      mode: decision.mode,
      basis: decision.basis,
      reason: decision.reason,
      ...(decision.deposit === undefined ? {} : { deposit: decision.deposit.toString() }),
      costs: Object.fromEntries(
        Object.entries(decision.costs).map(([k, v]) => [k, typeof v === "bigint" ? v.toString() : v]),
      ),
    },
    "policy decision",
  );
}

/**
 * Decides how to pay for a gated call: once, by subscribing, by a prepaid channel, or not at all.
 * @example
 * const { offer } = offerFromPaymentRequired(body)!;
 * const decision = decide({ offer, history: counter.count(key), budget: await ledger.report(agent) }, { logger });
 * if (decision.mode === "refuse") return `BudgetExceeded: ${decision.reason}`;
 */
export function decide(
  input: PolicyInput,
  options: { logger?: PolicyLogger | undefined } = {},
): PolicyDecision {
  const parsed = parsePolicyInput(input);
  const w = weigh(parsed);
  const preference = preferenceOf(w);
  const { mode, reason } = chooseMode(w, preference);
  const decision: PolicyDecision = {
    mode,
    reason,
    basis: preference.basis,
    costs: w.costs,
    available: { oneTime: w.oneTimeRoom?.room, subscription: w.subscriptionRoom?.room },
  };
  const { offer, budget, forecast, history } = parsed;
  if (offer.channel !== undefined) {
    weighChannel(decision, {
      channel: offer.channel,
      budget,
      provider: offer.provider,
      forecast,
      history,
      num: w.num,
      den: w.den,
      costScaled:
        mode === "one-time" ? w.oneTimeScaled : mode === "subscribe" ? w.subscriptionScaled : undefined,
      onlyChannel: w.price === undefined && w.plan === undefined,
    });
  }
  logDecision(options.logger, w, decision);
  return decision;
}
