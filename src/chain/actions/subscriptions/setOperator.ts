import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type SetOperatorParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  operator: Address;
  allowed: boolean;
};

/** Lets (or stops) an operator, such as a facilitator, deduct allowances on the client's plans. Returns the transaction hash. */
export function setOperator(
  client: WriteClient,
  { manager, operator, allowed }: SetOperatorParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "setOperator",
    args: [operator, allowed],
  });
}
