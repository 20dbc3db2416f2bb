import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetSubscriptionSpendParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionId: bigint;
};

/**
 * Reads a subscription's spend limit and what has been pulled for it (`spendOf`). A manager deployed
 * before spend limits has no `spendOf`: the call reverts.
 */
export async function getSubscriptionSpend(
  client: ReadClient,
  { manager, subscriptionId }: GetSubscriptionSpendParameters,
): Promise<{ spendLimit: bigint; spent: bigint }> {
  const [spendLimit, spent] = await client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "spendOf",
    args: [subscriptionId],
  });
  return { spendLimit, spent };
}
