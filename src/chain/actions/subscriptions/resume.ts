import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type ResumeParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Resumes the client's paused subscription (charging at once if it was due when paused). Returns the transaction hash. */
export function resume(client: WriteClient, { manager, subscriptionId }: ResumeParameters): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "resume",
    args: [subscriptionId],
  });
}
