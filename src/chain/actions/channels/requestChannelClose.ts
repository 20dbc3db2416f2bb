import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type RequestChannelCloseParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
};

/** The payer asks to close its channel; `withdrawChannel` works after the close delay. Returns the transaction hash. */
export function requestChannelClose(
  client: WriteClient,
  { channels, channelId }: RequestChannelCloseParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "requestClose",
    args: [channelId],
  });
}
