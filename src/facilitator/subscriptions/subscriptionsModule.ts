/**
 * Subscriptions in the facilitator: the SubscriptionManager indexer, the relayed subscription API, the
 * renewal keeper and metered usage (`/usage` and its settler), sharing one indexer so a relayed call, a
 * renewal run or a usage batch is visible in the index (and the event log) by the time it completes.
 * A facilitator without a SubscriptionManager runs none of it.
 */
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { mountUsageRoutes } from "../usage/usageRoutes.ts";
import { createUsageSettler, type UsageSettlerOptions } from "../usage/usageSettler.ts";
import { createRenewalKeeper, type RenewalKeeperOptions } from "./renewalKeeper.ts";
import { createSubscriptionIndexer, type SubscriptionIndexerOptions } from "./subscriptionIndexer.ts";
import { mountSubscriptionRoutes } from "./subscriptionRoutes.ts";
import { createSubscriptionService } from "./subscriptionService.ts";

export type SubscriptionsModuleOptions = {
  indexer?: SubscriptionIndexerOptions | undefined;
  /** Relayed calls one subscriber may have the facilitator pay gas for per hour (default 30). */
  maxRelaysPerHour?: number | undefined;
  /** Keeper settings, or `false` to run no keeper in this instance. */
  keeper?: RenewalKeeperOptions | false | undefined;
  /** Usage settler settings, or `false` to record usage here but settle it in another instance. */
  usage?: UsageSettlerOptions | false | undefined;
};

export function createSubscriptionsModule(
  options: SubscriptionsModuleOptions = {},
): FacilitatorModuleFactory {
  return (ctx) => {
    const manager = ctx.subscriptionManager;
    if (manager === undefined) return { name: "subscriptions" };
    const indexer = createSubscriptionIndexer(ctx, options.indexer);
    const service = createSubscriptionService(ctx, { indexer, maxRelaysPerHour: options.maxRelaysPerHour });
    const keeper =
      options.keeper === false ? undefined : createRenewalKeeper(ctx, { ...options.keeper, indexer });
    const usage =
      options.usage === false ? undefined : createUsageSettler(ctx, { ...options.usage, indexer });
    return {
      name: "subscriptions",
      routes(app) {
        mountSubscriptionRoutes(app, service);
        mountUsageRoutes(
          app,
          { ...ctx, subscriptionManager: manager },
          { onRecorded: () => usage?.signal() },
        );
      },
      async start() {
        await indexer.start();
        await keeper?.start();
        await usage?.start();
      },
      async stop() {
        await usage?.stop();
        await keeper?.stop();
        await indexer.stop();
      },
    };
  };
}

/** The subscriptions module with its defaults (listed in modules.ts). */
export const subscriptionsModule: FacilitatorModuleFactory = createSubscriptionsModule();
