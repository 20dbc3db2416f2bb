/**
 * The client part of `subscription`: a plan option may be taken out when the gate flags it
 * (`tollgate.subscriptionScheme`, §2.1), on the payer's network, run through its facilitator and not
 * deprecated. It has no `pay`: `fetchWithPayment` subscribes through the payer and then sends
 * `X-Tollgate-Sub` with a sub-auth token (up front on later calls to the origin).
 */
import { sameFacilitatorUrl } from "../../http/facilitatorClient.ts";
import { perCallPrice, pricingOfOption } from "../../protocol/pricing.ts";
import type { ClientSchemePart } from "../types.ts";

export const subscriptionClient: ClientSchemePart = {
  payable: (option, payer) =>
    option.scheme === "subscription" &&
    option.tollgate?.subscriptionScheme === true &&
    option.tollgate.planId !== undefined &&
    option.tollgate.successorPlanId === undefined &&
    option.network === payer.network &&
    sameFacilitatorUrl(option.tollgate.facilitator, payer.facilitator.url),
  // One call is assumed to cost one period: how many calls a period will see is the buyer's forecast.
  callPrice: (option) => {
    const pricing = pricingOfOption(option);
    return pricing === undefined ? BigInt(option.amount) : perCallPrice(pricing);
  },
};
