import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type CreatePlanParameters = {
  /** The SubscriptionManager. */
  manager: Address;
  token: Address;
  /** price per period */
  amount: bigint;
  /** period length in seconds */
  interval: bigint;
  /** units included per period (for gates; not enforced on chain) */
  includedUnits: bigint;
  /** price per unit beyond the included ones */
  overageUnitPrice: bigint;
};

/** Creates a plan paid to the client's account. The plan id is in the receipt's PlanCreated event (`getPlanIdFromReceipt`). Returns the transaction hash. */
export function createPlan(
  client: WriteClient,
  { manager, token, amount, interval, includedUnits, overageUnitPrice }: CreatePlanParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "createPlan",
    args: [token, amount, interval, includedUnits, overageUnitPrice],
  });
}
