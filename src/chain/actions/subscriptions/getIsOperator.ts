import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetIsOperatorParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  provider: Address;
  operator: Address;
};

/** Reads whether `operator` may deduct allowances on `provider`'s plans. */
export function getIsOperator(client: ReadClient, { manager, provider, operator }: GetIsOperatorParameters) {
  return client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "isOperator",
    args: [provider, operator],
  });
}
