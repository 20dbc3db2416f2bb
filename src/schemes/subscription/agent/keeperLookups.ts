/**
 * What a subscription keeper reads of the facilitator and the chain: a plan (cached per keeper; a
 * failed read is not), the network's SubscriptionManager (asked once; a failed answer is asked again),
 * the wallet's live subscription to a plan, and the current block.
 */
import type { Address } from "viem";
import { TollgateError } from "../../../protocol/errors.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import { getPlanInfo, getSubscriberInfo } from "../client/facilitatorSubscriptions.ts";
import type { KeeperPayer, SubscriptionKeeperOptions } from "./subscriptionKeeperTypes.ts";

export type KeeperLookups = {
  planInfo(planId: string): Promise<PlanInfo>;
  /** The SubscriptionManager the facilitator lists on the payer's network. */
  manager(): Promise<Address>;
  /** The wallet's live subscription to the plan as the chain has it (Active or Paused), if any. */
  onChain(planId: string): Promise<bigint | undefined>;
  /** The chain's current block (0 without a chain client). */
  currentBlock(): Promise<bigint>;
};

export function createKeeperLookups(
  payer: KeeperPayer,
  chain: SubscriptionKeeperOptions["chain"],
): KeeperLookups {
  const plans = new Map<string, Promise<PlanInfo>>();
  let managerOf: Promise<Address> | undefined;

  return {
    planInfo(planId) {
      let info = plans.get(planId);
      if (info === undefined) {
        info = getPlanInfo(payer.facilitator, planId);
        info.catch(() => plans.delete(planId));
        plans.set(planId, info);
      }
      return info;
    },

    manager() {
      managerOf ??= payer.facilitator.supported().then((supported) => {
        const found = supported.networks.find((n) => n.network === payer.network)?.subscriptionManager;
        if (found === undefined) {
          managerOf = undefined;
          throw new TollgateError(
            "UnsupportedNetwork",
            `the facilitator lists no SubscriptionManager on ${payer.network}`,
          );
        }
        return found;
      });
      return managerOf;
    },

    async onChain(planId) {
      const info = await getSubscriberInfo(payer.facilitator, payer.address);
      const held = info.subscriptions.find(
        (s) => s.planId === planId && (s.status === "Active" || s.status === "Paused"),
      );
      return held === undefined ? undefined : BigInt(held.subscriptionId);
    },

    async currentBlock() {
      return chain === undefined ? 0n : chain.getBlockNumber();
    },
  };
}
