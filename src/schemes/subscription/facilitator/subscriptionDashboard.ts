/**
 * What the subscription part adds to the facilitator's dashboard: the provider's Subscriptions and
 * Plans pages, the renewal dates of its index for the agent operator's views, and its plans named by
 * their terms for the revenue page. A facilitator without a SubscriptionManager still shows both
 * pages, saying it runs none.
 */
import type { SchemeDashboard } from "../../../facilitator/dashboard/schemeDashboard.ts";
import type { Store } from "../../../store/store.ts";
import { planNamesOf } from "./planTerms.ts";
import { mountPlanViews } from "./planViews.ts";
import { findSubscription, type IndexScope } from "./subscriptionRecords.ts";
import { mountSubscriptionViews } from "./subscriptionViews.ts";

export function subscriptionDashboard(store: Store, scope: IndexScope | undefined): SchemeDashboard {
  return {
    planNames: scope === undefined ? undefined : planNamesOf(store, scope),
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
