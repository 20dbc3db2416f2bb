import { sameAddress } from "../../protocol/address.ts";
import { type PaymentOption, type PaymentRequired, planTermsOf } from "../../protocol/paymentRequired.ts";
import { pricingOfOption } from "../../protocol/pricing.ts";
import { channelTermsOf } from "../../schemes/channel/channelTerms.ts";
import { type PolicyOffer, policyPlanOf } from "./policyOffer.ts";

/** The policy's view of a 402 together with the options to pay for each choice. */
export type OfferFromPaymentRequired = {
  offer: PolicyOffer;
  oneTimeOption: PaymentOption | undefined;
  subscriptionOption: PaymentOption | undefined;
  channelOption: PaymentOption | undefined;
};

/**
 * Reduces a 402 body to a `PolicyOffer`: its first `exact` option as the one-time price, its first
 * `subscription` option as the plan and its first well-formed `channel` option as the channel, on
 * `network` when given. All must pay the same provider: the subscription's when there is one, else the
 * one-time option's, else the channel's (others are dropped), since one decision weighs ways of paying
 * one seller. `undefined` when nothing is left to choose.
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
  const channelCandidate = candidates.find((o) => channelTermsOf(o) !== undefined);
  const firstProvider = subscriptionOption?.payTo ?? oneTimeOption?.payTo;
  const channelOption =
    channelCandidate !== undefined &&
    (firstProvider === undefined || sameAddress(channelCandidate.payTo, firstProvider))
      ? channelCandidate
      : undefined;
  const provider = firstProvider ?? channelOption?.payTo;
  if (provider === undefined) return undefined;
  // All read through the one pricing type; a zero price is none (a gate answering 402 asks for money).
  const oneTime = oneTimeOption === undefined ? undefined : pricingOfOption(oneTimeOption);
  const plan = subscriptionOption === undefined ? undefined : pricingOfOption(subscriptionOption);
  const channel = channelOption === undefined ? undefined : channelTermsOf(channelOption);
  const offer: PolicyOffer = { provider };
  if (oneTime?.type === "one-time") offer.oneTime = { amount: oneTime.amount };
  if (plan?.type === "subscription" || plan?.type === "metered") offer.subscription = policyPlanOf(plan);
  if (channel !== undefined && channel.price > 0n) {
    offer.channel = { amount: channel.price, minDeposit: channel.minDeposit };
  }
  if (offer.oneTime === undefined && offer.subscription === undefined && offer.channel === undefined) {
    return undefined;
  }
  return {
    offer,
    oneTimeOption: offer.oneTime === undefined ? undefined : oneTimeOption,
    subscriptionOption: offer.subscription === undefined ? undefined : subscriptionOption,
    channelOption: offer.channel === undefined ? undefined : channelOption,
  };
}
