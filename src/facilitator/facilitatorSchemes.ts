/**
 * The scheme parts every facilitator runs, in build and start order (stopped in reverse): one line
 * per scheme. Each part contributes its routes, checks, settlement and background work
 * (docs/schemes.md, "The facilitator part"); `createFacilitator({ schemes })` adds more or configures
 * one of these by id.
 */
import { channelFacilitatorPart } from "../schemes/channel/facilitator.ts";
import { exactFacilitator } from "../schemes/exact/facilitator.ts";
import { meteredFacilitatorPart } from "../schemes/metered/facilitator.ts";
import { subscriptionFacilitatorPart } from "../schemes/subscription/facilitator.ts";
import { x402ExactFacilitator } from "../schemes/x402Exact/facilitator.ts";
import type { FacilitatorSchemePart } from "./facilitatorSchemeParts.ts";

export const facilitatorSchemes: readonly FacilitatorSchemePart[] = [
  exactFacilitator,
  x402ExactFacilitator,
  subscriptionFacilitatorPart,
  meteredFacilitatorPart,
  channelFacilitatorPart,
];
