import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SetMaxOverageForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  maxOverage: bigint;
  deadline: bigint;
  /** the subscriber's SetMaxOverage intent */
  signature: Hex;
};

/** Relays a subscriber's signed SetMaxOverage intent. Returns the transaction hash. */
export function setMaxOverageFor(
  client: WriteClient,
  { manager, subscriptionId, maxOverage, deadline, signature }: SetMaxOverageForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "setMaxOverageFor",
    args: [subscriptionId, maxOverage, deadline, signature],
  });
}
