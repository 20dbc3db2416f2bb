import { type Address, getAbiItem, type Hex, type PublicClient } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";

export type GetAllowanceDeductedLogsParameters = {
  manager: Address;
  /** The deduction's bytes32 ref. */
  ref: Hex;
  fromBlock: bigint;
};

/** `AllowanceDeducted` logs of one ref since `fromBlock`: whether, and where, a deduction happened. */
export function getAllowanceDeductedLogs(
  client: Pick<PublicClient, "getLogs">,
  { manager, ref, fromBlock }: GetAllowanceDeductedLogsParameters,
) {
  return client.getLogs({
    address: manager,
    event: getAbiItem({ abi: subscriptionManagerAbi, name: "AllowanceDeducted" }),
    args: { ref },
    fromBlock,
  });
}
