/**
 * The subscription gate's `deduct` (createSubscriptionGate.ts), behind a handler's `deductAllowance`
 * (deductAllowance.ts): a charge against the subscription's overage cap this cycle, reserved in the
 * usage ledger like metered use and settled with it, with the one re-read of the state at the cap.
 */
import { TollgateError } from "../../../protocol/errors.ts";
import { isRenewalOverdue } from "./createSubscriptionStatusCache.ts";
import {
  EXHAUSTED_REFRESH_MS,
  LEASED_MESSAGE,
  type SubscriptionGateContext,
} from "./subscriptionGateContext.ts";
import type { AllowanceDeduction } from "./subscriptionGateTypes.ts";
import { reserve } from "./subscriptionUse.ts";

export async function deductSubscriptionAllowance(
  ctx: SubscriptionGateContext,
  subscriptionId: bigint,
  amount: bigint,
): Promise<AllowanceDeduction> {
  const { metering, renewalGraceSeconds, plans } = ctx.options;
  if (metering?.flusher === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      "paymentGate subscription pricing: deductAllowance needs `providerApiKey`, with which charges are settled",
      { details: { reason: "gate_misconfigured" } },
    );
  }
  const id = subscriptionId.toString();
  let info = await ctx.statuses.get(id);
  if (info === undefined || info.status !== "Active" || isRenewalOverdue(info, renewalGraceSeconds)) {
    throw new TollgateError("SubscriptionNotActive", `subscription ${id} is not active`, {
      details: { subscriptionId: id },
    });
  }
  const plan = await plans.get(info.planId);
  const { ledger, maxUnsettled } = metering;
  let reservation = await reserve(ctx, info, plan, 0, ledger, maxUnsettled, amount);
  if (!reservation.ok && reservation.reason === "AllowanceExhausted") {
    // As for metered use: the cap may have just been raised; read the chain again before refusing.
    const fresh = await ctx.statuses.get(id, { maxAgeMs: EXHAUSTED_REFRESH_MS });
    if (fresh !== undefined && fresh !== info && fresh.status === "Active") {
      info = fresh;
      reservation = await reserve(ctx, info, plan, 0, ledger, maxUnsettled, amount);
    }
  }
  if (reservation.ok) return { subscriptionId, amount };
  if (reservation.reason === "ExposureLimit") {
    const flusher = metering.flusher;
    void flusher.flush().then(() => flusher.reconcile());
    throw new TollgateError(
      "RateLimited",
      "this API's metered usage awaiting settlement is at its limit; retry shortly",
      { retryAfter: metering.retryAfterSeconds },
    );
  }
  if (reservation.reason === "Leased") {
    throw new TollgateError("RateLimited", LEASED_MESSAGE, { retryAfter: 1 });
  }
  throw new TollgateError(
    "AllowanceExhausted",
    ctx.exhaustion.exhausted(info, plan, reservation.unitsUsed, amount),
    {
      details: {
        subscriptionId: id,
        amount: amount.toString(),
        available: reservation.available.toString(),
      },
    },
  );
}
