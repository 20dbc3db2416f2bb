import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SetMaxOverageParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  maxOverage: bigint;
};

/** Sets the per-cycle overage cap of the client's subscription. Returns the transaction hash. */
export function setMaxOverage(
  client: WriteClient,
  { manager, subscriptionId, maxOverage }: SetMaxOverageParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "setMaxOverage",
    args: [subscriptionId, maxOverage],
  });
}
