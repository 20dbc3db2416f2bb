/**
 * A plan named for a person. The SubscriptionManager keeps no plan names, so a plan is named by its
 * terms: price per interval, and the included units and overage price of a metered plan
 * (`plan 2: 9 USDC / 30d, 1000 included, 0.001 USDC / unit over`).
 */
import type { PlanNames } from "../../../facilitator/dashboard/providerSection.ts";
import { type DisplayToken, duration, money } from "../../../http/dashboardLayout.ts";
import type { Queryable } from "../../../store/store.ts";
import { plansOfProvider } from "./providerPlanRecords.ts";
import type { IndexScope, PlanRow } from "./subscriptionRecords.ts";

/** `plan <id>: <price> / <interval>`, with the metered terms when the plan charges overage. */
export function planTerms(plan: PlanRow, token: DisplayToken): string {
  const metered =
    plan.overage_unit_price > 0n
      ? `, ${plan.included_units} included, ${money(plan.overage_unit_price, token)} / unit over`
      : "";
  return `plan ${plan.plan_id}: ${money(plan.amount, token)} / ${duration(plan.interval_seconds)}${metered}`;
}

/** The provider's plans of the index, each named by its terms. */
export function planNamesOf(db: Queryable, scope: IndexScope): PlanNames {
  return async (provider, token) => {
    const plans = await plansOfProvider(db, scope, provider);
    return new Map(plans.map((plan) => [plan.plan_id.toString(), planTerms(plan, token)]));
  };
}
