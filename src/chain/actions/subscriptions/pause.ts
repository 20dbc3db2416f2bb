import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type PauseParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Pauses the client's subscription, freezing its paid time. Returns the transaction hash. */
export function pause(client: WriteClient, { manager, subscriptionId }: PauseParameters): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "pause",
    args: [subscriptionId],
  });
}
