import type { Address, Hex } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type ReadChannelParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
};

/**
 * Reads a channel's on-chain state: payer, payee, token, deposit, claimed, session key, closeDelay,
 * closeRequestedAt (0 while open) and closed. A channel that was never opened has the zero payer.
 */
export function readChannel(client: ReadClient, { channels, channelId }: ReadChannelParameters) {
  return client.readContract({
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "channels",
    args: [channelId],
  });
}
