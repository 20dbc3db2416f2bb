import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type CollectManyParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionIds: readonly bigint[];
};

/** Charges every due subscription among the ids and skips the rest. Returns the transaction hash. */
export function collectMany(
  client: WriteClient,
  { manager, subscriptionIds }: CollectManyParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "collectMany",
    args: [subscriptionIds],
  });
}
