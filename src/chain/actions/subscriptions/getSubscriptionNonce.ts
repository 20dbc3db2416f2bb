import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetSubscriptionNonceParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriber: Address;
};

/** Reads the subscriber's intent nonce: the next relayed intent must sign this value. */
export function getSubscriptionNonce(
  client: ReadClient,
  { manager, subscriber }: GetSubscriptionNonceParameters,
) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "nonces",
    args: [subscriber],
  });
}
