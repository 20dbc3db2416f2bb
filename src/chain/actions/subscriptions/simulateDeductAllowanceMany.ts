import type { Address, Hex, PublicClient } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SimulateDeductAllowanceManyParameters = {
  manager: Address;
  account: Address;
  subscriptionIds: readonly bigint[];
  amounts: readonly bigint[];
  refs: readonly Hex[];
};

/** Simulates `deductAllowanceMany`; throws viem's error (with the decoded revert) when it would revert. */
export async function simulateDeductAllowanceMany(
  client: Pick<PublicClient, "simulateContract">,
  { manager, account, subscriptionIds, amounts, refs }: SimulateDeductAllowanceManyParameters,
): Promise<void> {
  await client.simulateContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deductAllowanceMany",
    args: [subscriptionIds, amounts, refs],
    account,
  });
}
