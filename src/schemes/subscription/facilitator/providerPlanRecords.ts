/**
 * Read-only views of one provider's plans and subscriptions for the dashboard, from the subscription
 * index and parsed by the index's own row schemas. Every query is scoped to the provider.
 */
import { DASHBOARD_ROW_LIMIT } from "../../../facilitator/dashboard/providerRecords.ts";
import { queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
import {
  type IndexScope,
  type PlanRow,
  PlanRowSchema,
  type SubscriptionRow,
  SubscriptionRowSchema,
} from "./subscriptionRecords.ts";

/** The provider's plans, newest first. */
export function plansOfProvider(db: Queryable, scope: IndexScope, provider: string): Promise<PlanRow[]> {
  return queryParsed(
    db,
    PlanRowSchema,
    `SELECT * FROM plans WHERE chain_id = $1 AND manager = $2 AND provider = $3
     ORDER BY plan_id DESC LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [scope.chainId, scope.manager.toLowerCase(), provider.toLowerCase()],
  );
}

/** The provider's subscriptions (every state), next renewal first. */
export function subscriptionsOfProvider(
  db: Queryable,
  scope: IndexScope,
  provider: string,
): Promise<SubscriptionRow[]> {
  return queryParsed(
    db,
    SubscriptionRowSchema,
    `SELECT * FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND provider = $3
     ORDER BY current_period_end, subscription_id LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [scope.chainId, scope.manager.toLowerCase(), provider.toLowerCase()],
  );
}
