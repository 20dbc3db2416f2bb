import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type ResumeForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  deadline: bigint;
  /** the subscriber's Resume intent */
  signature: Hex;
};

/** Relays a subscriber's signed Resume intent. Returns the transaction hash. */
export function resumeFor(
  client: WriteClient,
  { manager, subscriptionId, deadline, signature }: ResumeForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "resumeFor",
    args: [subscriptionId, deadline, signature],
  });
}
