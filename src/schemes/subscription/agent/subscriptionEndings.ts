/**
 * How a keeper stops a subscription in its books and says so: `end` records it paused or ended (an
 * ended one gives its hold back to the budget and closes its spend), `alert` logs and reports it.
 */
import {
  type AgentSubscriptionRecord,
  holdRefOf,
  setSubscriptionStatus,
} from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";
import type { SubscriptionAlert } from "./subscriptionKeeperTypes.ts";

export type SubscriptionEndings = {
  end(record: AgentSubscriptionRecord, status: "paused" | "ended", note: string): Promise<void>;
  alert(
    record: AgentSubscriptionRecord,
    action: SubscriptionAlert["action"],
    reason: string,
    beyondHold?: bigint,
  ): void;
};

export function createSubscriptionEndings(
  ctx: KeeperContext,
  onAlert: ((alert: SubscriptionAlert) => void) | undefined,
): SubscriptionEndings {
  const { agent, budget, store } = ctx;
  return {
    async end(record, status, note) {
      await setSubscriptionStatus(store, record.id, status, ctx.now(), note);
      if (status === "ended") {
        await budget.releaseHold(agent, holdRefOf(record.id));
        await budget.endSubscription(agent, holdRefOf(record.id));
      }
    },

    alert(record, action, reason, beyondHold = 0n) {
      const event: SubscriptionAlert = {
        agent,
        subscriptionId: record.subscriptionId ?? 0n,
        planId: record.planId,
        provider: record.provider,
        action,
        reason,
        beyondHold,
      };
      ctx.logger?.warn(
        { ...event, subscriptionId: event.subscriptionId.toString(), beyondHold: beyondHold.toString() },
        `subscription ${action}: ${reason}`,
      );
      onAlert?.(event);
    },
  };
}
