/**
 * How a payer reads a 402's `subscription` options: which plans it may take out, and what one call
 * under a plan is taken to cost.
 */
import { sameFacilitatorUrl } from "../../../http/facilitatorClient.ts";
import type { PaymentOption } from "../../../protocol/paymentRequired.ts";
import { perCallPrice, pricingOfOption } from "../../../protocol/pricing.ts";
import type { SchemePayer } from "../../types.ts";

/**
 * A plan option may be taken out when the gate flags it (`tollgate.subscriptionScheme`), on the
 * payer's network, run through its facilitator and not deprecated.
 */
export function isSubscribableOption(option: PaymentOption, payer: SchemePayer): boolean {
  return (
    option.scheme === "subscription" &&
    option.tollgate?.subscriptionScheme === true &&
    option.tollgate.planId !== undefined &&
    option.tollgate.successorPlanId === undefined &&
    option.network === payer.network &&
    sameFacilitatorUrl(option.tollgate.facilitator, payer.facilitator.url)
  );
}

/** One call is assumed to cost one period: how many calls a period will see is the buyer's forecast. */
export function planCallPrice(option: PaymentOption): bigint {
  const pricing = pricingOfOption(option);
  return pricing === undefined ? BigInt(option.amount) : perCallPrice(pricing);
}
