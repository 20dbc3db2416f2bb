import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SetSpendLimitForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
  spendLimit: bigint;
  deadline: bigint;
  /** the subscriber's SetSpendLimit intent */
  signature: Hex;
};

/** Relays a subscriber's signed SetSpendLimit intent. Returns the transaction hash. */
export function setSpendLimitFor(
  client: WriteClient,
  { manager, subscriptionId, spendLimit, deadline, signature }: SetSpendLimitForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "setSpendLimitFor",
    args: [subscriptionId, spendLimit, deadline, signature],
  });
}
