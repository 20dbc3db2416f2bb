import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type PauseForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  deadline: bigint;
  /** the subscriber's Pause intent */
  signature: Hex;
};

/** Relays a subscriber's signed Pause intent. Returns the transaction hash. */
export function pauseFor(
  client: WriteClient,
  { manager, subscriptionId, deadline, signature }: PauseForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "pauseFor",
    args: [subscriptionId, deadline, signature],
  });
}
