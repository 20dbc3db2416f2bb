/**
 * The subscription gate's event feed (createSubscriptionGate.ts): what each facilitator event drops
 * (a subscription's cached state, a deprecated plan) or records (settled usage in the ledger), and the
 * poller that reads the feed — idle without a provider API key, which the feed requires.
 */
import type { FeedEvent } from "../../../protocol/subscriptions.ts";
import { createEventPoller, type EventPoller } from "./createEventPoller.ts";
import type { SubscriptionStatusCache } from "./createSubscriptionStatusCache.ts";
import type { SubscriptionGateOptions } from "./subscriptionGateTypes.ts";

/** The poller of a gate without a provider API key: the event feed would refuse it. */
const idlePoller: EventPoller = {
  cursor: undefined,
  pollOnce: () => Promise.resolve(),
  start() {},
  stop: () => Promise.resolve(),
};

/** Applies one facilitator event to the gate's caches and usage ledger. */
export async function applyGateEvent(
  options: SubscriptionGateOptions,
  statuses: SubscriptionStatusCache,
  event: FeedEvent,
): Promise<void> {
  const { plans, metering, logger } = options;
  const data = event.data;
  const subscriptionId = typeof data.subscriptionId === "string" ? data.subscriptionId : undefined;
  if (event.type.startsWith("subscription.") && subscriptionId !== undefined) {
    statuses.invalidate(subscriptionId);
  } else if (event.type === "plan.deprecated" && typeof data.planId === "string") {
    plans.invalidate(data.planId);
  } else if (event.type === "allowance.deducted" || event.type === "allowance.exhausted") {
    if (subscriptionId !== undefined) statuses.invalidate(subscriptionId);
    const ref = typeof data.usageRef === "string" ? data.usageRef : undefined;
    if (ref !== undefined && metering !== undefined) {
      const outcome = event.type === "allowance.deducted" ? "settled" : "failed";
      // Awaited, so `syncEvents()` resolves only once the exposure is lowered. A failure is logged;
      // the flusher's reconciliation looks the charge up again later.
      await metering.ledger.resolve([{ ref, outcome }]).catch((error: unknown) => {
        logger?.warn({ err: error, ref }, "settled usage could not be recorded in the usage ledger");
      });
    }
  }
}

/** The gate's event poller: the feed's, or an idle one without a provider API key. */
export function createGateEventPoller(
  options: SubscriptionGateOptions,
  statuses: SubscriptionStatusCache,
): EventPoller {
  return options.providerApiKey === undefined
    ? idlePoller
    : createEventPoller({
        facilitator: options.facilitator,
        provider: options.payTo,
        apiKey: options.providerApiKey,
        onEvent: (event) => applyGateEvent(options, statuses, event),
        intervalMs: options.eventPollMs,
        logger: options.logger,
      });
}
