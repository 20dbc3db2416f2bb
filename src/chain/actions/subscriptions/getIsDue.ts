import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetIsDueParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Reads whether `collect` would charge the subscription now. */
export function getIsDue(client: ReadClient, { manager, subscriptionId }: GetIsDueParameters) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "isDue",
    args: [subscriptionId],
  });
}
