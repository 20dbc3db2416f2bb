import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type CancelParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Cancels a subscription (as its subscriber or the plan's provider). Returns the transaction hash. */
export function cancel(client: WriteClient, { manager, subscriptionId }: CancelParameters): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "cancel",
    args: [subscriptionId],
  });
}
