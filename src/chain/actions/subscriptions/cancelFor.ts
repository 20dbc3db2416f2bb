import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type CancelForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  deadline: bigint;
  /** the subscriber's Cancel intent */
  signature: Hex;
};

/** Relays a subscriber's signed Cancel intent. Returns the transaction hash. */
export function cancelFor(
  client: WriteClient,
  { manager, subscriptionId, deadline, signature }: CancelForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "cancelFor",
    args: [subscriptionId, deadline, signature],
  });
}
