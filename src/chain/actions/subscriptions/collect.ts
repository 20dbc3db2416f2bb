import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type CollectParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/** Charges a due subscription; a failed pull marks it PastDue (RenewalFailed) instead of reverting. Returns the transaction hash. */
export function collect(client: WriteClient, { manager, subscriptionId }: CollectParameters): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "collect",
    args: [subscriptionId],
  });
}
