/**
 * The agent's subscriptions as the facilitator holds them, for the cancel policy
 * (`cancelUnneededSubscriptions`): listed through the facilitator's subscription routes, cancelled by
 * the payer or the budget's subscription keeper, and the check a run makes as it ends.
 */
import type { Address } from "viem";
import {
  type CancelLogger,
  cancelUnneededSubscriptions,
  createCancelClaims,
  type HeldSubscriptionSource,
  type SubscriptionCancelOutcome,
} from "../../../agent/policy/cancelUnneededSubscriptions.ts";
import type { DemandHistory } from "../../../agent/policy/createDemandHistory.ts";
import type { HeldSubscription } from "../../../agent/policy/reviewSubscription.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Store } from "../../../store/store.ts";
import { getPlanInfo, getSubscriberInfo, getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";

/**
 * Reads the subscriber's Active subscriptions and their plan terms through the facilitator, and
 * cancels through `payer.cancel`, or through `options.keeper` when given: the budget's subscription
 * keeper (`createSubscriptionKeeper`), which also ends the budget's hold and alerts with the reason.
 */
export function facilitatorSubscriptions(
  payer: {
    address: Address;
    facilitator: FacilitatorClient;
    cancel(subscriptionId: string): Promise<unknown>;
  },
  options: { keeper?: { cancel(subscriptionId: bigint, reason: string): Promise<void> } | undefined } = {},
): HeldSubscriptionSource {
  return {
    async list() {
      const info = await getSubscriberInfo(payer.facilitator, payer.address);
      const subscriptions: HeldSubscription[] = [];
      for (const s of info.subscriptions) {
        if (s.status !== "Active") continue;
        const [sub, plan] = await Promise.all([
          getSubscriptionInfo(payer.facilitator, s.subscriptionId),
          getPlanInfo(payer.facilitator, s.planId),
        ]);
        subscriptions.push({
          subscriptionId: sub.subscriptionId,
          planId: sub.planId,
          provider: sub.provider,
          status: sub.status,
          amount: BigInt(sub.amount),
          interval: sub.interval,
          includedUnits: Number(plan.includedUnits),
          overageUnitPrice: BigInt(plan.overageUnitPrice),
          nextChargeAt: sub.nextChargeAt === null ? null : Number(sub.nextChargeAt),
        });
      }
      return { subscriptions, chainTime: Number(info.chainTime) };
    },
    async cancel(subscriptionId, reason) {
      if (options.keeper !== undefined) await options.keeper.cancel(BigInt(subscriptionId), reason);
      else await payer.cancel(subscriptionId);
    },
  };
}

/**
 * The check a run makes as it ends (`tollgate run`): the payer's subscriptions through the facilitator,
 * cancels claimed in the agent's store. Returns the subscriptions cancelled (or whose cancel failed),
 * with their reasons, for the run's report; a check that cannot be made is logged and returns nothing,
 * since the run's own work is done.
 */
export async function cancelUnneededAfterRun(options: {
  agent: string;
  payer: {
    address: Address;
    facilitator: FacilitatorClient;
    cancel(subscriptionId: string): Promise<unknown>;
  };
  store: Store;
  demand: DemandHistory;
  clock: Clock;
  logger?: CancelLogger | undefined;
}): Promise<SubscriptionCancelOutcome[]> {
  try {
    const outcomes = await cancelUnneededSubscriptions({
      agent: options.agent,
      subscriber: options.payer.address,
      source: facilitatorSubscriptions(options.payer),
      demand: options.demand,
      claims: createCancelClaims({ store: options.store, clock: options.clock }),
      clock: options.clock,
      logger: options.logger,
    });
    return outcomes.filter((o) => o.outcome === "cancelled" || o.outcome === "failed");
  } catch (error) {
    options.logger?.warn({ agent: options.agent, err: error }, "could not review the agent's subscriptions");
    return [];
  }
}
