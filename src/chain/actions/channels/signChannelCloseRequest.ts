import type { Hex } from "viem";
import type { TypedDataSigner } from "../../signers/typedDataSigner.ts";
import type { ChannelDomain } from "./channelHashes.ts";

/** TollgateChannels' EIP-712 domain name and version (its constructor's EIP712 arguments). */
export const channelsDomainName = "Tollgate Channels";
export const channelsDomainVersion = "1";

/** EIP-712 types of the payer's relayed close request; matches REQUEST_CLOSE_TYPEHASH. */
export const requestCloseTypes = {
  RequestClose: [
    { name: "channelId", type: "bytes32" },
    { name: "deadline", type: "uint256" },
  ],
} as const;

/** The TollgateChannels EIP-712 domain on a chain. */
export function channelsDomain({ chainId, channels }: ChannelDomain) {
  return {
    name: channelsDomainName,
    version: channelsDomainVersion,
    chainId,
    verifyingContract: channels,
  } as const;
}

/** Signs the payer's RequestClose(channelId, deadline) for `requestChannelCloseFor` (deadline inclusive). */
export function signChannelCloseRequest(
  signer: TypedDataSigner,
  p: ChannelDomain & { channelId: Hex; deadline: bigint },
): Promise<Hex> {
  return signer.signTypedData({
    domain: channelsDomain(p),
    types: requestCloseTypes,
    primaryType: "RequestClose",
    message: { channelId: p.channelId, deadline: p.deadline },
  });
}
