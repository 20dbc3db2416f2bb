/**
 * The subscription gate's reports of a use refused at the cap (createSubscriptionGate.ts): tells the
 * facilitator (`POST /usage/exhausted`) that a call was refused at the cap, so that it emits
 * `allowance.exhausted`: once per subscription and cycle from this gate (the facilitator de-duplicates
 * across instances too), in the background, never delaying the refusal. A report that fails is
 * forgotten, so a later refusal tries again. Needs the provider API key.
 */
import type { GateLogger } from "../../../gate/gateLogger.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { formatUnitsExact } from "../../../protocol/amount.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import type { GatePlan } from "./createPlanCatalog.ts";
import { reportAllowanceExhausted } from "./usage/postUsage.ts";

/** Cycles whose exhaustion this gate remembers having reported (oldest forgotten first). */
const MAX_EXHAUSTION_REPORTS = 10_000;

export type ExhaustionReports = {
  /** The refusal's message for a use at the cap; reports it to the facilitator on the way. */
  exhausted(info: SubscriptionInfo, plan: GatePlan, unitsUsed: bigint, charge: bigint): string;
};

export function createExhaustionReports(options: {
  facilitator: Pick<FacilitatorClient, "request">;
  providerApiKey?: string | undefined;
  decimals: number;
  logger?: GateLogger | undefined;
}): ExhaustionReports {
  const { facilitator, logger } = options;
  const reported = new Set<string>();
  const reportExhausted = (info: SubscriptionInfo, amount: bigint) => {
    const apiKey = options.providerApiKey;
    if (apiKey === undefined) return;
    const key = `${info.subscriptionId}:${info.periodStart}`;
    if (reported.has(key)) return;
    if (reported.size >= MAX_EXHAUSTION_REPORTS) reported.delete(reported.values().next().value as string);
    reported.add(key);
    reportAllowanceExhausted(
      facilitator,
      { apiKey, subscriptionId: BigInt(info.subscriptionId), amount },
      { timeoutMs: 10_000 },
    ).catch((error: unknown) => {
      reported.delete(key);
      logger?.warn(
        { err: error, subscriptionId: info.subscriptionId },
        "allowance exhaustion could not be reported",
      );
    });
  };
  return {
    exhausted(info, plan, unitsUsed, charge) {
      reportExhausted(info, charge);
      return plan.overageUnitPrice === 0n && charge === 0n
        ? `subscription ${info.subscriptionId} has used the ${plan.includedUnits} units its plan includes this period, and the plan has no overage: upgrade the plan or wait for the renewal`
        : `subscription ${info.subscriptionId} has reached its overage cap of ${formatUnitsExact(BigInt(info.maxOverage), options.decimals)} this period (${unitsUsed} units used, ${plan.includedUnits} included): raise the cap (payer.setMaxOverage) or upgrade the plan`;
    },
  };
}
