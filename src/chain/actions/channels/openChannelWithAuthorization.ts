import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

/** The terms of a channel and the payer's EIP-3009 ReceiveWithAuthorization that funds it. */
export type ChannelOpenAuthorization = {
  payer: Address;
  payee: Address;
  token: Address;
  amount: bigint;
  sessionKeyX: Hex;
  sessionKeyY: Hex;
  closeDelay: bigint;
  salt: Hex;
  validAfter: bigint;
  validBefore: bigint;
  /** The payer's ReceiveWithAuthorization signature (`signChannelOpen`). */
  signature: Hex;
};

export type OpenChannelWithAuthorizationParameters = ChannelOpenAuthorization & {
  /** The TollgateChannels contract. */
  channels: Address;
};

/** Arguments of `openWithAuthorization`, in order (for simulation and for an outbox entry). */
export function openChannelWithAuthorizationArgs(o: ChannelOpenAuthorization) {
  return [
    o.payer,
    o.payee,
    o.token,
    o.amount,
    o.sessionKeyX,
    o.sessionKeyY,
    o.closeDelay,
    o.salt,
    o.validAfter,
    o.validBefore,
    o.signature,
  ] as const;
}

/** Relays a gasless channel open signed by the payer; any account may send it. Returns the transaction hash. */
export function openChannelWithAuthorization(
  client: WriteClient,
  { channels, ...open }: OpenChannelWithAuthorizationParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "openWithAuthorization",
    args: openChannelWithAuthorizationArgs(open),
  });
}
