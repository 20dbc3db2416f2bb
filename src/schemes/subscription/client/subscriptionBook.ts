/**
 * The payer's book of subscriptions (`payer.subscriptions`): those it took out or was told of, by plan,
 * and the gate origins each one is sent to up front. In memory: a payer is one process's view of one
 * account.
 *
 * Invariant: one plan is subscribed to once per payer — concurrent `ensure` calls for a plan share
 * the one `create` in flight.
 */
import type { OriginSubscription, PayerSubscriptions } from "../../../client/payerTypes.ts";

export function createSubscriptionBook(): PayerSubscriptions {
  const byPlan = new Map<string, bigint>();
  const byOrigin = new Map<string, OriginSubscription>();
  const creating = new Map<string, Promise<bigint>>();
  const book: PayerSubscriptions = {
    forPlan: (planId) => byPlan.get(String(planId)),
    forOrigin: (origin) => byOrigin.get(origin),
    remember({ planId, subscriptionId, origin, audience }) {
      byPlan.set(String(planId), subscriptionId);
      if (origin !== undefined) {
        byOrigin.set(origin, { subscriptionId, planId: String(planId), audience: audience ?? origin });
      }
    },
    unbind(origin) {
      byOrigin.delete(origin);
    },
    forget(subscriptionId) {
      for (const [plan, id] of byPlan) if (id === subscriptionId) byPlan.delete(plan);
      for (const [origin, entry] of byOrigin)
        if (entry.subscriptionId === subscriptionId) byOrigin.delete(origin);
    },
    async ensure(planId, create) {
      const key = String(planId);
      const known = byPlan.get(key);
      if (known !== undefined) return { subscriptionId: known, created: false };
      let pending = creating.get(key);
      const mine = pending === undefined;
      if (pending === undefined) {
        pending = create().finally(() => creating.delete(key));
        creating.set(key, pending);
      }
      const subscriptionId = await pending;
      byPlan.set(key, subscriptionId);
      return { subscriptionId, created: mine };
    },
  };
  return book;
}
