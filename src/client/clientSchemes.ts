/**
 * The payer's built-in schemes, in precedence order (the gate's order: a subscription before a one-time
 * proof before an x402 payload, then channels), each its id and description with its client part only:
 * a payer never loads a scheme's gate or facilitator part. `metered` has no client part (its plans are
 * served as subscriptions); it is listed so that its id stays taken. Adding a scheme is one line here
 * (docs/schemes.md).
 *
 * The payer's own flows that schemes provide are composed here too: its one-time payment (`exact`,
 * `payer.pay`) and its subscription methods (`payer.subscribe`, …).
 */

import { channelAbout } from "../schemes/channel/about.ts";
import { channelClient } from "../schemes/channel/client.ts";
import { exactAbout } from "../schemes/exact/about.ts";
import { exactClient, payExactOption } from "../schemes/exact/client.ts";
import { meteredAbout } from "../schemes/metered/about.ts";
import { subscriptionAbout } from "../schemes/subscription/about.ts";
import {
  createSubscriptionPayerMethods,
  type SubscribingPayer,
  type SubscriptionPayerMethods,
} from "../schemes/subscription/client/subscriptionPayer.ts";
import { subscriptionClient } from "../schemes/subscription/client.ts";
import type { Scheme } from "../schemes/types.ts";
import { x402ExactAbout } from "../schemes/x402Exact/about.ts";
import { x402ExactClient } from "../schemes/x402Exact/client.ts";
import type { PayerContext, PayOnce } from "./payerTypes.ts";

export const clientSchemes: readonly Scheme[] = [
  { ...subscriptionAbout, client: subscriptionClient },
  meteredAbout,
  { ...exactAbout, client: exactClient },
  { ...x402ExactAbout, client: x402ExactClient },
  { ...channelAbout, client: channelClient },
];

/** What the built-in schemes add to a payer made by `createPayer` besides paying once. */
export type BuiltinPayerMethods = SubscriptionPayerMethods;

/** What `fetchWithPayment` uses of those methods, when a payer has them. */
export type BuiltinFetchPayer = SubscribingPayer;

/** The payer's one-time payment and its added methods, for one payer. */
export function builtinPayerParts(context: PayerContext): { payOnce: PayOnce; methods: BuiltinPayerMethods } {
  return {
    payOnce: (option, ceiling, signal) => payExactOption(context, option, ceiling, signal),
    methods: createSubscriptionPayerMethods(context),
  };
}
