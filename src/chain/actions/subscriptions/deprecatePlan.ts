import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type DeprecatePlanParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  planId: bigint;
  /** 0 for none */
  successorPlanId: bigint;
};

/** Closes a plan to new subscribers and names its successor. Returns the transaction hash. */
export function deprecatePlan(
  client: WriteClient,
  { manager, planId, successorPlanId }: DeprecatePlanParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deprecatePlan",
    args: [planId, successorPlanId],
  });
}
