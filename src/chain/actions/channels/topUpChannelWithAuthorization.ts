import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type TopUpChannelWithAuthorizationParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  channelId: Hex;
  amount: bigint;
  salt: Hex;
  validAfter: bigint;
  validBefore: bigint;
  /** The payer's ReceiveWithAuthorization signature (`signChannelTopUp`). */
  signature: Hex;
};

/** Relays a gasless top-up signed by the channel's payer. Returns the transaction hash. */
export function topUpChannelWithAuthorization(
  client: WriteClient,
  p: TopUpChannelWithAuthorizationParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: p.channels,
    abi: tollgateChannelsAbi,
    functionName: "topUpWithAuthorization",
    args: [p.channelId, p.amount, p.salt, p.validAfter, p.validBefore, p.signature],
  });
}
