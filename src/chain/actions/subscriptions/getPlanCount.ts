import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetPlanCountParameters = {
  /** The SubscriptionManager. */
  manager: Address;
};

/** Reads the number of plans (plan ids run from 1 to this). */
export function getPlanCount(client: ReadClient, { manager }: GetPlanCountParameters) {
  return client.readContract({ address: manager, abi: subscriptionManagerAbi, functionName: "planCount" });
}
