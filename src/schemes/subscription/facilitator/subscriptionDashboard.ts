/**
 * What the subscription part adds to the facilitator's dashboard: the provider's Subscriptions and
 * Plans pages, the renewal dates of its index for the agent operator's views, and its plans named by
 * their terms for the revenue page. A facilitator without a SubscriptionManager still shows both
 * pages, saying it runs none.
 */
import type { PlanNames } from "../../../facilitator/dashboard/providerSection.ts";
import type { SchemeDashboard } from "../../../facilitator/dashboard/schemeDashboard.ts";
import { duration, money } from "../../../http/dashboardLayout.ts";
import type { Store } from "../../../store/store.ts";
import { mountPlanViews } from "./planViews.ts";
import { plansOfProvider } from "./providerPlanRecords.ts";
import { findSubscription, type IndexScope } from "./subscriptionRecords.ts";
import { mountSubscriptionViews } from "./subscriptionViews.ts";

export function subscriptionDashboard(store: Store, scope: IndexScope | undefined): SchemeDashboard {
  return {
    planNames: scope === undefined ? undefined : planTerms(store, scope),
    providerViews: (host) => [
      mountSubscriptionViews({ store, token: host.token, scope }),
      mountPlanViews({
        store,
        scope,
        token: host.token,
        publicClient: host.publicClient,
        planSigner: host.providerWallet,
        indexWaitMs: host.indexWaitMs,
      }),
    ],
    nextRenewal:
      scope === undefined
        ? undefined
        : async (manager, subscriptionId) => {
            if (manager.toLowerCase() !== scope.manager.toLowerCase()) return undefined;
            const row = await findSubscription(store, scope, subscriptionId);
            // Active and PastDue subscriptions are charged at the period's end.
            return row === undefined || (row.status !== "Active" && row.status !== "PastDue")
              ? undefined
              : row.current_period_end;
          },
  };
}

/**
 * The SubscriptionManager keeps no plan names, so a plan is named by its terms: price per interval,
 * and the included units and overage price of a metered plan (`9 USDC / 30d, 1000 included,
 * 0.001 USDC / unit over`).
 */
function planTerms(store: Store, scope: IndexScope): PlanNames {
  return async (provider, token) => {
    const plans = await plansOfProvider(store, scope, provider);
    const price = (amount: bigint) => money(amount, token);
    return new Map(
      plans.map((plan) => {
        const metered =
          plan.overage_unit_price > 0n
            ? `, ${plan.included_units} included, ${price(plan.overage_unit_price)} / unit over`
            : "";
        return [
          plan.plan_id.toString(),
          `plan ${plan.plan_id}: ${price(plan.amount)} / ${duration(plan.interval_seconds)}${metered}`,
        ];
      }),
    );
  };
}
