import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type DeductAllowanceParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  amount: bigint;
  /** 32-byte reference echoed in AllowanceDeducted */
  ref: Hex;
};

/** Pulls metered overage now (as the plan's provider or its operator); reverts AllowanceExhausted past the cycle's cap. Returns the transaction hash. */
export function deductAllowance(
  client: WriteClient,
  { manager, subscriptionId, amount, ref }: DeductAllowanceParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deductAllowance",
    args: [subscriptionId, amount, ref],
  });
}
