/**
 * The modules every facilitator runs, in start order (stopped in reverse). Adding a feature to the
 * facilitator is adding its factory here.
 */
import { analyticsModule } from "./analytics/createAnalyticsModule.ts";
import type { FacilitatorModuleFactory } from "./facilitatorModule.ts";
import { providersModule } from "./providers/providersModule.ts";
import { eventFeedModule } from "./subscriptions/eventFeed.ts";
import { subscriptionsModule } from "./subscriptions/subscriptionsModule.ts";
import { webhooksModule } from "./webhooks/createWebhooksModule.ts";

export const builtinModules: readonly FacilitatorModuleFactory[] = [
  providersModule,
  subscriptionsModule,
  eventFeedModule,
  webhooksModule,
  analyticsModule,
];
