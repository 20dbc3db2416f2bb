/**
 * The `subscription` scheme's facilitator part: the SubscriptionManager indexer, the relayed
 * subscription API (`/plans`, `/subscriptions`, `/subscribers`: gasless subscribe, pause, resume,
 * cancel, overage, each one outbox transaction) and the renewal keeper (due renewals collected in
 * batches through the outbox), and its pages of the dashboard. A facilitator without a
 * SubscriptionManager builds a part with the dashboard pages only (saying so).
 * The `metered` part reads this part's indexer, so a usage batch is indexed by the time it completes.
 * Loaded by the facilitator only, never by a gate.
 */
import {
  defineFacilitatorScheme,
  type FacilitatorPart,
  type FacilitatorSchemeContext,
} from "../../facilitator/facilitatorSchemeParts.ts";
import { createRenewalKeeper, type RenewalKeeperOptions } from "./facilitator/renewalKeeper.ts";
import { subscriptionDashboard } from "./facilitator/subscriptionDashboard.ts";
import {
  createSubscriptionIndexer,
  type SubscriptionIndexer,
  type SubscriptionIndexerOptions,
} from "./facilitator/subscriptionIndexer.ts";
import { mountSubscriptionRoutes } from "./facilitator/subscriptionRoutes.ts";
import { createSubscriptionService } from "./facilitator/subscriptionService.ts";

export type SubscriptionFacilitatorOptions = {
  indexer?: SubscriptionIndexerOptions | undefined;
  /** Relayed calls one subscriber may have the facilitator pay gas for per hour (default 30). */
  maxRelaysPerHour?: number | undefined;
  /** Keeper settings, or `false` to run no keeper in this instance. */
  keeper?: RenewalKeeperOptions | false | undefined;
};

/** The subscription part as built: its indexer, for the `metered` part. */
export type SubscriptionFacilitatorPart = FacilitatorPart & { indexer?: SubscriptionIndexer | undefined };

/**
 * @example
 * createFacilitator({ …, schemes: [subscriptionFacilitator({ keeper: { intervalMs: 500 } })] });
 */
export function subscriptionFacilitator(options: SubscriptionFacilitatorOptions = {}) {
  return defineFacilitatorScheme({
    id: "subscription",
    create(ctx: FacilitatorSchemeContext): SubscriptionFacilitatorPart {
      const scope =
        ctx.subscriptionManager === undefined
          ? undefined
          : { chainId: ctx.chainId, manager: ctx.subscriptionManager };
      const dashboard = subscriptionDashboard(ctx.store, scope);
      if (ctx.subscriptionManager === undefined) return { dashboard };
      const indexer = createSubscriptionIndexer(ctx, options.indexer);
      const service = createSubscriptionService(ctx, { indexer, maxRelaysPerHour: options.maxRelaysPerHour });
      const keeper =
        options.keeper === false ? undefined : createRenewalKeeper(ctx, { ...options.keeper, indexer });
      return {
        indexer,
        dashboard,
        rateLimited: ["/subscriptions", "/subscriptions/*"],
        routes(app) {
          mountSubscriptionRoutes(app, service);
        },
        async start() {
          await indexer.start();
          await keeper?.start();
        },
        async close() {
          await keeper?.stop();
          await indexer.stop();
        },
      };
    },
  });
}

/** The part with its defaults (listed in src/facilitator/facilitatorSchemes.ts). */
export const subscriptionFacilitatorPart = subscriptionFacilitator();
