/**
 * The subscription gate's decision once the token's signer, the subscription's state and its plan are
 * known and match the route (createSubscriptionGate.ts): status, renewal, units and, on a metered route,
 * the reservation in the usage ledger, with the one re-read of the state at the cap before refusing.
 */
import type { RouteRequest } from "../../../gate/gateRequest.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import type { GatePlan } from "./createPlanCatalog.ts";
import { isRenewalOverdue, renewalOverdueMessage } from "./createSubscriptionStatusCache.ts";
import {
  EXHAUSTED_REFRESH_MS,
  LEASED_MESSAGE,
  refuse,
  type StateNumbers,
  type SubscriptionGateContext,
} from "./subscriptionGateContext.ts";
import type { SubscriptionGate, SubscriptionOutcome, SubscriptionRoute } from "./subscriptionGateTypes.ts";
import type { Reservation, UsageLedger, UsageRequest } from "./usage/usageLedger.ts";

export type CheckRequest = Parameters<SubscriptionGate["check"]>[0];

export function unitsOf(route: SubscriptionRoute, plan: GatePlan, request: RouteRequest): number {
  if (plan.includedUnits === 0n && plan.overageUnitPrice === 0n) return 0;
  const units = typeof route.units === "function" ? route.units(request) : (route.units ?? 1);
  if (!Number.isSafeInteger(units) || units < 0) {
    throw new TollgateError(
      "Internal",
      `the route's units function returned ${String(units)}, not a whole number`,
    );
  }
  return units;
}

/** A state's numbers as the ledger reads them, parsed once per state read from the facilitator. */
export function numbersOf(ctx: SubscriptionGateContext, info: SubscriptionInfo): StateNumbers {
  let numbers = ctx.parsed.get(info);
  if (numbers === undefined) {
    numbers = {
      id: BigInt(info.subscriptionId),
      maxOverage: BigInt(info.maxOverage),
      overageUsed: BigInt(info.overageUsed),
    };
    ctx.parsed.set(info, numbers);
  }
  return numbers;
}

export function usageRequest(
  ctx: SubscriptionGateContext,
  info: SubscriptionInfo,
  plan: GatePlan,
  units: number,
  maxUnsettled: bigint,
  charge?: bigint,
): UsageRequest {
  const numbers = numbersOf(ctx, info);
  return {
    charge,
    subscriptionId: numbers.id,
    periodStart: info.periodStart,
    periodEnd: info.currentPeriodEnd,
    units,
    includedUnits: plan.includedUnits,
    unitPrice: plan.overageUnitPrice,
    maxOverage: numbers.maxOverage,
    overageUsed: numbers.overageUsed,
    maxUnsettled,
  };
}

export const reserve = (
  ctx: SubscriptionGateContext,
  info: SubscriptionInfo,
  plan: GatePlan,
  units: number,
  ledger: UsageLedger,
  maxUnsettled: bigint,
  charge?: bigint,
) => ledger.reserve(usageRequest(ctx, info, plan, units, maxUnsettled, charge));

function pass(
  ctx: SubscriptionGateContext,
  info: SubscriptionInfo,
  units: number,
  unitsUsed: bigint | undefined,
  charge: bigint,
): SubscriptionOutcome {
  return {
    kind: "pass",
    subscription: {
      subscriptionId: numbersOf(ctx, info).id,
      subscriber: info.subscriber,
      planId: info.planId,
      units,
      unitsUsed,
      charge,
    },
  };
}

/**
 * The checks once the token's signer, the subscription's state and its plan are known and match
 * the route: status, renewal, units and, on a metered route, the reservation. Without a promise
 * when the ledger answers from memory.
 */
export function decide(
  ctx: SubscriptionGateContext,
  request: CheckRequest,
  info: SubscriptionInfo,
  plan: GatePlan,
): SubscriptionOutcome | Promise<SubscriptionOutcome> {
  const { metering } = ctx.options;
  if (info.status !== "Active") {
    const why = {
      Paused: "is paused: resume it to use it again",
      Cancelled: "is cancelled",
      PastDue: "is past due: its last renewal could not be charged",
    }[info.status];
    return refuse("SubscriptionNotActive", `subscription ${request.subscriptionId} ${why}`);
  }
  if (isRenewalOverdue(info, ctx.options.renewalGraceSeconds)) {
    return refuse("SubscriptionNotActive", renewalOverdueMessage(info));
  }
  const units = unitsOf(request.route, plan, request.routeRequest);
  if (units > 0 && plan.overageUnitPrice > 0n && metering?.flusher === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `paymentGate subscription pricing: plan ${plan.planId} charges overage, so the gate needs \`providerApiKey\` to settle it`,
      { details: { reason: "gate_misconfigured" } },
    );
  }
  if (units === 0 || metering === undefined) return pass(ctx, info, units, undefined, 0n);
  const { ledger, maxUnsettled } = metering;
  if (ledger.reserveNow !== undefined) {
    const reservation = ledger.reserveNow(usageRequest(ctx, info, plan, units, maxUnsettled));
    return reservation.ok
      ? pass(ctx, info, units, reservation.unitsUsed, reservation.charge)
      : refusedUse(ctx, request.subscriptionId, info, plan, units, reservation);
  }
  return reserve(ctx, info, plan, units, ledger, maxUnsettled).then((reservation) =>
    reservation.ok
      ? pass(ctx, info, units, reservation.unitsUsed, reservation.charge)
      : refusedUse(ctx, request.subscriptionId, info, plan, units, reservation),
  );
}

/** A metered use the ledger refused: at the cap, the state is read again once before refusing. */
async function refusedUse(
  ctx: SubscriptionGateContext,
  subscriptionId: string,
  info: SubscriptionInfo,
  plan: GatePlan,
  units: number,
  first: Reservation & { ok: false },
): Promise<SubscriptionOutcome> {
  const metering = ctx.options.metering;
  const { ledger, maxUnsettled, flusher, retryAfterSeconds } = metering as NonNullable<typeof metering>;
  let reservation: Reservation = first;
  if (first.reason === "AllowanceExhausted" && plan.overageUnitPrice > 0n) {
    // The subscriber may have just raised its cap (or renewed): read the chain again before refusing.
    const fresh = await ctx.statuses.get(subscriptionId, { maxAgeMs: EXHAUSTED_REFRESH_MS });
    if (
      fresh !== undefined &&
      fresh !== info &&
      fresh.status === "Active" &&
      !isRenewalOverdue(fresh, ctx.options.renewalGraceSeconds)
    ) {
      info = fresh;
      reservation = await reserve(ctx, info, plan, units, ledger, maxUnsettled);
    }
  }
  if (reservation.ok) return pass(ctx, info, units, reservation.unitsUsed, reservation.charge);
  if (reservation.reason === "ExposureLimit") {
    void flusher?.flush().then(() => flusher.reconcile());
    return {
      kind: "busy",
      message: "this API's metered usage awaiting settlement is at its limit; retry shortly",
      retryAfter: retryAfterSeconds,
    };
  }
  if (reservation.reason === "Leased") {
    return { kind: "busy", message: LEASED_MESSAGE, retryAfter: 1 };
  }
  return refuse(
    "AllowanceExhausted",
    ctx.exhaustion.exhausted(info, plan, reservation.unitsUsed, reservation.charge),
  );
}
