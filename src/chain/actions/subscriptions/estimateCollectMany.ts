import type { Address, PublicClient } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type EstimateCollectManyParameters = {
  manager: Address;
  account: Address;
  subscriptionIds: readonly bigint[];
};

/** Gas `collectMany` needs; throws viem's error when the call would revert. */
export function estimateCollectMany(
  client: Pick<PublicClient, "estimateContractGas">,
  { manager, account, subscriptionIds }: EstimateCollectManyParameters,
): Promise<bigint> {
  return client.estimateContractGas({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "collectMany",
    args: [subscriptionIds],
    account,
  });
}
