import type { Address, Hex } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { contractCall, type TxCall } from "../txCall.ts";

export type DeductAllowanceManyCallParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  subscriptionIds: readonly bigint[];
  amounts: readonly bigint[];
  refs: readonly Hex[];
  /** Gas limit (an estimate with headroom: `estimateDeductAllowanceMany`). */
  gas: bigint;
};

/** `deductAllowanceMany` as a `TxCall` for the facilitator's outbox. */
export function deductAllowanceManyCall({
  manager,
  subscriptionIds,
  amounts,
  refs,
  gas,
}: DeductAllowanceManyCallParameters): TxCall {
  return contractCall({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "deductAllowanceMany",
    args: [subscriptionIds, amounts, refs],
    gas,
  });
}
