import type { Address, Hex, PublicClient } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type EstimateDeductAllowanceManyParameters = {
  manager: Address;
  /** The operator that would send it. */
  account: Address;
  subscriptionIds: readonly bigint[];
  amounts: readonly bigint[];
  refs: readonly Hex[];
};

/** Gas `deductAllowanceMany` needs; throws viem's error when the call would revert. */
export function estimateDeductAllowanceMany(
  client: Pick<PublicClient, "estimateContractGas">,
  { manager, account, subscriptionIds, amounts, refs }: EstimateDeductAllowanceManyParameters,
): Promise<bigint> {
  return client.estimateContractGas({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deductAllowanceMany",
    args: [subscriptionIds, amounts, refs],
    account,
  });
}
