import type { Address, Hex } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { type RelayedCall, relayedCall } from "../relayedCall.ts";

/** A subscriber's signed Subscribe intent, relayed (`subscribeFor`). */
export function subscribeForRelay(p: {
  manager: Address;
  subscriber: Address;
  planId: bigint;
  maxOverage: bigint;
  spendLimit: bigint;
  deadline: bigint;
  signature: Hex;
}): RelayedCall {
  return relayedCall({
    address: p.manager,
    abi: subscriptionManagerAbi,
    functionName: "subscribeFor",
    args: [p.subscriber, p.planId, p.maxOverage, p.spendLimit, p.deadline, p.signature],
  });
}
