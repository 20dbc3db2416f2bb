import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetSubscriptionCountParameters = {
  /** The SubscriptionManager. */
  manager: Address;
};

/** Reads the number of subscriptions (ids run from 1 to this). */
export function getSubscriptionCount(client: ReadClient, { manager }: GetSubscriptionCountParameters) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "subscriptionCount",
  });
}
