import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type RequestChannelCloseForParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
  /** Unix seconds, inclusive. */
  deadline: bigint;
  /** The payer's EIP-712 RequestClose signature (`signChannelCloseRequest`). */
  signature: Hex;
};

/** Relays a payer-signed close request; any account may send it. Returns the transaction hash. */
export function requestChannelCloseFor(
  client: WriteClient,
  { channels, channelId, deadline, signature }: RequestChannelCloseForParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "requestCloseFor",
    args: [channelId, deadline, signature],
  });
}
