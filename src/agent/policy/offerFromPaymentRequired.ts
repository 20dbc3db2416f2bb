import { sameAddress } from "../../protocol/address.ts";
import type { PaymentOption, PaymentRequired } from "../../protocol/paymentRequired.ts";
import type { AgentSchemes, PolicyTerms } from "../agentScheme.ts";
import { defaultAgentSchemes } from "../agentSchemes.ts";
import type { PolicyOffer } from "./policyOffer.ts";

/** The policy's view of a 402 together with the options to pay for each choice. */
export type OfferFromPaymentRequired = {
  offer: PolicyOffer;
  oneTimeOption: PaymentOption | undefined;
  subscriptionOption: PaymentOption | undefined;
  channelOption: PaymentOption | undefined;
};

/** The first option of a 402 offering one choice, with the terms its scheme's part read from it. */
type Candidate<C extends PolicyTerms["choice"]> = {
  option: PaymentOption;
  terms: Extract<PolicyTerms, { choice: C }>["terms"];
};

type Candidates = {
  oneTime?: Candidate<"oneTime">;
  subscription?: Candidate<"subscription">;
  channel?: Candidate<"channel">;
};

/** The first candidate for each choice, in the 402's order, as the parts of the options' schemes read them. */
function candidatesOf(options: readonly PaymentOption[], schemes: AgentSchemes): Candidates {
  const found: Record<string, { option: PaymentOption; terms: unknown }> = {};
  for (const option of options) {
    const read = schemes.offer(option.scheme)?.policyTerms(option);
    if (read !== undefined) found[read.choice] ??= { option, terms: read.terms };
  }
  // Each entry holds the terms its choice's part answered, so the record is the typed `Candidates`.
  return found as Candidates;
}

/**
 * Reduces a 402 body to a `PolicyOffer`, asking each option's scheme (its agent part) what it offers:
 * the first option paying once per call (`exact`) as the one-time price, the first with plan terms
 * (`subscription`) as the plan and the first well-formed prepaid channel (`channel`) as the channel,
 * on `network` when given. All must pay the same provider: the subscription's when there is one, else
 * the one-time option's, else the channel's (others are dropped), since one decision weighs ways of
 * paying one seller. `undefined` when nothing is left to choose.
 */
export function offerFromPaymentRequired(
  paymentRequired: PaymentRequired,
  options: { network?: string | undefined; schemes?: AgentSchemes | undefined } = {},
): OfferFromPaymentRequired | undefined {
  const candidates = paymentRequired.accepts.filter(
    (o) => options.network === undefined || o.network === options.network,
  );
  const found = candidatesOf(candidates, options.schemes ?? defaultAgentSchemes);
  const subscriptionOption = found.subscription?.option;
  const oneTime =
    found.oneTime !== undefined &&
    (subscriptionOption === undefined || sameAddress(found.oneTime.option.payTo, subscriptionOption.payTo))
      ? found.oneTime
      : undefined;
  const firstProvider = subscriptionOption?.payTo ?? oneTime?.option.payTo;
  const channel =
    found.channel !== undefined &&
    (firstProvider === undefined || sameAddress(found.channel.option.payTo, firstProvider))
      ? found.channel
      : undefined;
  const provider = firstProvider ?? channel?.option.payTo;
  if (provider === undefined) return undefined;
  // A choice whose terms offer nothing (a zero price) is none: a gate answering 402 asks for money.
  const offer: PolicyOffer = { provider };
  if (oneTime?.terms !== undefined) offer.oneTime = oneTime.terms;
  if (found.subscription?.terms !== undefined) offer.subscription = found.subscription.terms;
  if (channel?.terms !== undefined) offer.channel = channel.terms;
  if (offer.oneTime === undefined && offer.subscription === undefined && offer.channel === undefined) {
    return undefined;
  }
  return {
    offer,
    oneTimeOption: offer.oneTime === undefined ? undefined : oneTime?.option,
    subscriptionOption: offer.subscription === undefined ? undefined : subscriptionOption,
    channelOption: offer.channel === undefined ? undefined : channel?.option,
  };
}
