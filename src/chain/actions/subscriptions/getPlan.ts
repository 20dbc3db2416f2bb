import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetPlanParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  planId: bigint;
};

/** Reads a plan; a missing plan reads with a zero provider. */
export function getPlan(client: ReadClient, { manager, planId }: GetPlanParameters) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "plans",
    args: [planId],
  });
}
