import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetSubscriptionManagerDomainSeparatorParameters = {
  /** The SubscriptionManager. */
  manager: Address;
};

/** Reads the SubscriptionManager's EIP-712 domain separator. */
export function getSubscriptionManagerDomainSeparator(
  client: ReadClient,
  { manager }: GetSubscriptionManagerDomainSeparatorParameters,
) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "DOMAIN_SEPARATOR",
  });
}
