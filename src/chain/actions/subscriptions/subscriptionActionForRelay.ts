import type { Address, Hex } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { type RelayedCall, relayedCall } from "../relayedCall.ts";

/**
 * A subscriber's signed lifecycle intent, relayed: `pauseFor`, `resumeFor`, `cancelFor`, or
 * `setMaxOverageFor` for the `overage` action, `setSpendLimitFor` for the `limit` action.
 */
export function subscriptionActionForRelay(
  p: { manager: Address; subscriptionId: bigint; deadline: bigint; signature: Hex } & (
    | { action: "pause" | "resume" | "cancel" }
    | { action: "overage"; maxOverage: bigint }
    | { action: "limit"; spendLimit: bigint }
  ),
): RelayedCall {
  if (p.action === "limit") {
    return relayedCall({
      address: p.manager,
      abi: subscriptionManagerAbi,
      functionName: "setSpendLimitFor",
      args: [p.subscriptionId, p.spendLimit, p.deadline, p.signature],
    });
  }
  if (p.action === "overage") {
    return relayedCall({
      address: p.manager,
      abi: subscriptionManagerAbi,
      functionName: "setMaxOverageFor",
      args: [p.subscriptionId, p.maxOverage, p.deadline, p.signature],
    });
  }
  return relayedCall({
    address: p.manager,
    abi: subscriptionManagerAbi,
    functionName: `${p.action}For`,
    args: [p.subscriptionId, p.deadline, p.signature],
  });
}
