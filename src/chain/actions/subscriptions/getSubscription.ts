import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetSubscriptionParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Reads a subscription; `status` is a `SubscriptionStatus` number (0 = no such subscription). */
export function getSubscription(client: ReadClient, { manager, subscriptionId }: GetSubscriptionParameters) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "subscriptions",
    args: [subscriptionId],
  });
}
