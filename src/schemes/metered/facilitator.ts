/**
 * The `metered` scheme's facilitator part: `POST /usage`, `POST /usage/exhausted` and `GET /usage`
 * (provider-authenticated metered deductions, recorded durably) and the usage settler that deducts
 * them in batches through the outbox. It runs over the `subscription` part's indexer (built before it),
 * and only when the facilitator has a SubscriptionManager. Loaded by the facilitator only.
 */
import {
  defineFacilitatorScheme,
  type FacilitatorSchemeContext,
} from "../../facilitator/facilitatorSchemeParts.ts";
import { mountUsageRoutes } from "../subscription/facilitator/usage/usageRoutes.ts";
import {
  createUsageSettler,
  type UsageSettlerOptions,
} from "../subscription/facilitator/usage/usageSettler.ts";
import type { SubscriptionFacilitatorPart } from "../subscription/facilitator.ts";

export type MeteredFacilitatorOptions = {
  /** Usage settler settings, or `false` to record usage here but settle it in another instance. */
  usage?: UsageSettlerOptions | false | undefined;
};

export function meteredFacilitator(options: MeteredFacilitatorOptions = {}) {
  return defineFacilitatorScheme({
    id: "metered",
    create(ctx: FacilitatorSchemeContext) {
      const manager = ctx.subscriptionManager;
      if (manager === undefined) return {};
      const indexer = ctx.part<SubscriptionFacilitatorPart>("subscription")?.indexer;
      const usage =
        options.usage === false ? undefined : createUsageSettler(ctx, { ...options.usage, indexer });
      return {
        routes(app) {
          mountUsageRoutes(
            app,
            { ...ctx, subscriptionManager: manager },
            { onRecorded: () => usage?.signal() },
          );
        },
        async start() {
          await usage?.start();
        },
        async close() {
          await usage?.stop();
        },
      };
    },
  });
}

/** The part with its defaults (listed in src/facilitator/facilitatorSchemes.ts). */
export const meteredFacilitatorPart = meteredFacilitator();
