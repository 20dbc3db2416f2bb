/**
 * The client part of `subscription`: a plan option may be taken out when the gate flags it
 * (`tollgate.subscriptionScheme`), on the payer's network, run through its facilitator and not
 * deprecated. It has no `pay`: in `fetchWithPayment` its flows subscribe through the payer and send
 * `X-Tollgate-Sub` with a sub-auth token (up front on later calls to the origin).
 */
import type { ClientSchemePart } from "../types.ts";
import { isSubscribableOption, planCallPrice } from "./client/planOptions.ts";
import { createSubscriptionFlows } from "./client/subscriptionFlows.ts";

export const subscriptionClient: ClientSchemePart = {
  payable: isSubscribableOption,
  callPrice: planCallPrice,
  flows: createSubscriptionFlows,
};
