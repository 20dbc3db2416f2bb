/**
 * The gate's built-in schemes: each scheme's id and description (`about.ts`) with its gate part only,
 * so a gate loads no client, facilitator or agent code. Order is precedence: when a request carries
 * credentials of several, the earlier scheme's part owns it (a subscription before a one-time proof
 * before an x402 payload, as the gate has always read them). The one place the gate names a scheme
 * (docs/architecture.md, "The scheme seam"); adding a built-in scheme is one line here.
 */
import { channelAbout } from "../schemes/channel/about.ts";
import { channelGate } from "../schemes/channel/gate.ts";
import { exactAbout } from "../schemes/exact/about.ts";
import { type ExactOffer, exactGate } from "../schemes/exact/gate.ts";
import { meteredAbout } from "../schemes/metered/about.ts";
import { meteredGate } from "../schemes/metered/gate.ts";
import { subscriptionAbout } from "../schemes/subscription/about.ts";
import { type SubscriptionOffer, subscriptionGate } from "../schemes/subscription/gate.ts";
import type { Scheme } from "../schemes/types.ts";
import { x402ExactAbout } from "../schemes/x402Exact/about.ts";
import { x402ExactGate } from "../schemes/x402Exact/gate.ts";

export const gateSchemes: readonly Scheme[] = [
  { ...subscriptionAbout, gate: subscriptionGate },
  { ...meteredAbout, gate: meteredGate },
  { ...exactAbout, gate: exactGate },
  { ...x402ExactAbout, gate: x402ExactGate },
  { ...channelAbout, gate: channelGate },
];

/** An offer whose terms its caller resolved, of a built-in scheme (`composePaymentRequired`). */
export type ResolvedOffer = ExactOffer | SubscriptionOffer;
