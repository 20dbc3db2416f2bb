import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { NO_SPEND_LIMIT } from "../../signers/eip712Types.ts";

export type SubscribeParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  planId: bigint;
  /** cap on overage per cycle, in token units */
  maxOverage: bigint;
  /** The most ever pulled for the subscription, first period included. Default: no limit. */
  spendLimit?: bigint | undefined;
};

/** Subscribes the client's account and charges the first period (needs an approval). The id is in the receipt's SubscriptionCreated event (`getSubscriptionIdFromReceipt`). Returns the transaction hash. */
export function subscribe(
  client: WriteClient,
  { manager, planId, maxOverage, spendLimit = NO_SPEND_LIMIT }: SubscribeParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "subscribe",
    args: [planId, maxOverage, spendLimit],
  });
}
