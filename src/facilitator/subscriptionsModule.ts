/**
 * Subscriptions as a facilitator module: a carrier of the `subscription` and `metered` schemes'
 * facilitator parts (src/schemes/subscription/facilitator.ts, src/schemes/metered/facilitator.ts) with
 * these options, for facilitators configured through `modules`. The parts replace the built-in ones;
 * `createFacilitator({ schemes: [subscriptionFacilitator(…), meteredFacilitator(…)] })` does the same
 * without a module.
 */

import { meteredFacilitator } from "../schemes/metered/facilitator.ts";
import type { UsageSettlerOptions } from "../schemes/subscription/facilitator/usage/usageSettler.ts";
import {
  type SubscriptionFacilitatorOptions,
  subscriptionFacilitator,
} from "../schemes/subscription/facilitator.ts";
import { carrierModule, type SchemeCarrierModule } from "./facilitatorModule.ts";

export type SubscriptionsModuleOptions = SubscriptionFacilitatorOptions & {
  /** Usage settler settings, or `false` to record usage here but settle it in another instance. */
  usage?: UsageSettlerOptions | false | undefined;
};

export function createSubscriptionsModule(options: SubscriptionsModuleOptions = {}): SchemeCarrierModule {
  const { usage, ...subscription } = options;
  return carrierModule("subscriptions", [
    subscriptionFacilitator(subscription),
    meteredFacilitator({ usage }),
  ]);
}

/** The subscriptions module with its defaults. */
export const subscriptionsModule: SchemeCarrierModule = createSubscriptionsModule();
