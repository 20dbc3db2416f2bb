/**
 * The modules every facilitator runs, in start order (stopped in reverse), after its scheme parts
 * (facilitatorSchemes.ts). Adding a feature to the facilitator is adding its factory here; adding what
 * a payment scheme does there is adding its part to facilitatorSchemes.ts.
 */

import { analyticsModule } from "./analytics/createAnalyticsModule.ts";
import { eventFeedModule } from "./eventFeed.ts";
import type { FacilitatorModuleFactory } from "./facilitatorModule.ts";
import { providersModule } from "./providers/providersModule.ts";
import { webhooksModule } from "./webhooks/createWebhooksModule.ts";

export const builtinModules: readonly FacilitatorModuleFactory[] = [
  providersModule,
  eventFeedModule,
  webhooksModule,
  analyticsModule,
];
