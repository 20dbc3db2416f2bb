import { type Address, getAbiItem, type Hex, type PublicClient } from "viem";
import { subscriptionManagerAbi } from "../../contracts/artifacts/SubscriptionManager.ts";
import { getLogsPaged } from "../getLogsPaged.ts";

export type GetAllowanceDeductedLogsParameters = {
  manager: Address;
  /** The deduction's bytes32 ref. */
  ref: Hex;
  fromBlock: bigint;
  /** Most blocks one `eth_getLogs` call spans (default 2 000): providers refuse wider ranges. */
  maxRange?: bigint | number | undefined;
};

/**
 * `AllowanceDeducted` logs of one ref since `fromBlock`: whether, and where, a deduction happened. A ref
 * is deducted once, so the range is read newest page first and the search stops at the page that has it.
 */
export function getAllowanceDeductedLogs(
  client: Pick<PublicClient, "getLogs" | "getBlockNumber">,
  { manager, ref, fromBlock, maxRange }: GetAllowanceDeductedLogsParameters,
) {
  return getLogsPaged(client, {
    address: manager,
    event: getAbiItem({ abi: subscriptionManagerAbi, name: "AllowanceDeducted" }),
    args: { ref },
    fromBlock,
    maxRange,
    order: "newest-first",
  });
}
