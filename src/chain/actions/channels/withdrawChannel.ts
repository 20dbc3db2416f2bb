import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type WithdrawChannelParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
};

/**
 * After a close request and its delay: returns the unclaimed deposit to the payer and closes the channel.
 * Any account may send it. Returns the transaction hash.
 */
export function withdrawChannel(
  client: WriteClient,
  { channels, channelId }: WithdrawChannelParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "withdraw",
    args: [channelId],
  });
}
