import { sameAddress } from "../../protocol/address.ts";
import { type PaymentOption, type PaymentRequired, planTermsOf } from "../../protocol/paymentRequired.ts";
import type { PolicyOffer } from "./policyOffer.ts";

/** The policy's view of a 402 together with the options to pay for each choice. */
export type OfferFromPaymentRequired = {
  offer: PolicyOffer;
  oneTimeOption: PaymentOption | undefined;
  subscriptionOption: PaymentOption | undefined;
};

/**
 * Reduces a 402 body to a `PolicyOffer`: its first `exact` option as the one-time price and its first
 * `subscription` option as the plan, on `network` when given. When both exist they must pay the same
 * provider; otherwise only the subscription's provider is kept (the one-time option is dropped), since
 * one decision weighs two ways of paying one seller. `undefined` when nothing is left to choose.
 */
export function offerFromPaymentRequired(
  paymentRequired: PaymentRequired,
  options: { network?: string | undefined } = {},
): OfferFromPaymentRequired | undefined {
  const candidates = paymentRequired.accepts.filter(
    (o) => options.network === undefined || o.network === options.network,
  );
  const subscriptionOption = candidates.find(
    (o) => o.scheme === "subscription" && planTermsOf(o) !== undefined,
  );
  const exact = candidates.find((o) => o.scheme === "exact");
  const oneTimeOption =
    exact !== undefined &&
    (subscriptionOption === undefined || sameAddress(exact.payTo, subscriptionOption.payTo))
      ? exact
      : undefined;
  const provider = subscriptionOption?.payTo ?? oneTimeOption?.payTo;
  if (provider === undefined) return undefined;
  const plan = subscriptionOption === undefined ? undefined : planTermsOf(subscriptionOption);
  const offer: PolicyOffer = { provider };
  // A zero price is not a choice to weigh: a gate answering 402 asks for money.
  if (oneTimeOption !== undefined && BigInt(oneTimeOption.amount) > 0n) {
    offer.oneTime = { amount: BigInt(oneTimeOption.amount) };
  }
  if (plan !== undefined && BigInt(plan.amount) > 0n) {
    offer.subscription = {
      planId: plan.planId,
      amount: BigInt(plan.amount),
      interval: plan.interval,
      includedUnits: plan.includedUnits,
      overageUnitPrice: BigInt(plan.overageUnitPrice),
    };
  }
  if (offer.oneTime === undefined && offer.subscription === undefined) return undefined;
  return {
    offer,
    oneTimeOption: offer.oneTime === undefined ? undefined : oneTimeOption,
    subscriptionOption: offer.subscription === undefined ? undefined : subscriptionOption,
  };
}
