import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type DeductAllowanceManyParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionIds: readonly bigint[];
  amounts: readonly bigint[];
  refs: readonly Hex[];
};

/** Batch deductAllowance with per-item outcomes (AllowanceDeducted or DeductionFailed events). Returns the transaction hash. */
export function deductAllowanceMany(
  client: WriteClient,
  { manager, subscriptionIds, amounts, refs }: DeductAllowanceManyParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deductAllowanceMany",
    args: [subscriptionIds, amounts, refs],
  });
}
