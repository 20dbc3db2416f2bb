import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type TopUpChannelParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
  amount: bigint;
};

/** Adds to a channel's deposit from the client (its payer) under its token approval. Returns the transaction hash. */
export function topUpChannel(
  client: WriteClient,
  { channels, channelId, amount }: TopUpChannelParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "topUp",
    args: [channelId, amount],
  });
}
