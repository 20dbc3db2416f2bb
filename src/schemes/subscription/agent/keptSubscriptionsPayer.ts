/**
 * The payer a paid tool hands to `fetchWithPayment`: the same payer, except that taking out a
 * subscription goes through the agent's subscription keeper (stored claim, budget hold, exact
 * approval) instead of the payer's in-memory book alone. A subscription this process already uses is
 * still taken from the book, so a subscribed call costs no store round trip.
 */
import type { Address } from "viem";
import type { Payer } from "../../../client/createPayer.ts";
import type { PayerSubscriptions } from "../../../client/payerTypes.ts";
import type { SubscriptionKeeper } from "./createSubscriptionKeeper.ts";

/** What the keeper is asked for when a call subscribes: the cap it would like, and whom it pays. */
export type SubscribeTerms = { desiredCap: bigint; provider?: Address | undefined };

export function keptSubscriptionsPayer(
  payer: Payer,
  keeper: SubscriptionKeeper,
  terms: () => SubscribeTerms,
): Payer {
  const book = payer.subscriptions;
  const subscriptions: PayerSubscriptions = {
    forPlan: (planId) => book.forPlan(planId),
    forOrigin: (origin) => book.forOrigin(origin),
    remember: (entry) => book.remember(entry),
    unbind: (origin) => book.unbind(origin),
    forget: (subscriptionId) => book.forget(subscriptionId),
    async ensure(planId) {
      const known = book.forPlan(planId);
      if (known !== undefined) return { subscriptionId: known, created: false };
      const { desiredCap, provider } = terms();
      const ensured = await keeper.ensure({ planId: String(planId), desiredCap, provider });
      book.remember({ planId, subscriptionId: ensured.subscriptionId });
      return { subscriptionId: ensured.subscriptionId, created: ensured.created };
    },
  };
  return { ...payer, subscriptions };
}
