import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SetSpendLimitParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  spendLimit: bigint;
};

/** Sets the most ever pulled for the client's subscription in total. Returns the transaction hash. */
export function setSpendLimit(
  client: WriteClient,
  { manager, subscriptionId, spendLimit }: SetSpendLimitParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "setSpendLimit",
    args: [subscriptionId, spendLimit],
  });
}
