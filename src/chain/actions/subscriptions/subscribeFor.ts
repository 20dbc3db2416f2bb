import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SubscribeForParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriber: Address;
  planId: bigint;
  maxOverage: bigint;
  /** The spend limit the intent signed. */
  spendLimit: bigint;
  deadline: bigint;
  /** the subscriber's Subscribe intent (`signSubscribeIntent`) */
  signature: Hex;
};

/** Relays a subscriber's signed Subscribe intent; the client pays the gas. Returns the transaction hash. */
export function subscribeFor(
  client: WriteClient,
  { manager, subscriber, planId, maxOverage, spendLimit, deadline, signature }: SubscribeForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "subscribeFor",
    args: [subscriber, planId, maxOverage, spendLimit, deadline, signature],
  });
}
