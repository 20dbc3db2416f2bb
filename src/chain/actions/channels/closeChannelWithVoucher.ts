import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type CloseChannelWithVoucherParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
  /** The latest voucher's cumulative amount (at most what was claimed, with signature "0x", to close without paying more). */
  cumulativeAmount: bigint;
  signature: Hex;
};

/**
 * Cooperative close by the payee or its operator: pays the voucher's new amount to the payee and the rest
 * of the deposit to the payer at once. Returns the transaction hash.
 */
export function closeChannelWithVoucher(
  client: WriteClient,
  { channels, channelId, cumulativeAmount, signature }: CloseChannelWithVoucherParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "closeWithVoucher",
    args: [channelId, cumulativeAmount, signature],
  });
}
