import type { Address } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { contractCall, type TxCall } from "../txCall.ts";

export type CollectManyCallParameters = {
  manager: Address;
  subscriptionIds: readonly bigint[];
  /** Gas limit (an estimate with headroom: `estimateCollectMany`). */
  gas: bigint;
};

/** `collectMany` as a `TxCall` for the facilitator's outbox. */
export function collectManyCall({ manager, subscriptionIds, gas }: CollectManyCallParameters): TxCall {
  return contractCall({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "collectMany",
    args: [subscriptionIds],
    gas,
  });
}
