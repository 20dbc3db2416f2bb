import type { Address, Hex } from "viem";
import { receiveWithAuthorizationTypes, type TokenDomain } from "../../signers/eip712Types.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";
import type { TypedDataSigner } from "../../signers/typedDataSigner.ts";
import { type ChannelDomain, computeChannelId, computeChannelOpenNonce } from "./channelHashes.ts";

export type SignChannelOpenParameters = ChannelDomain & {
  /** The token's EIP-712 domain (`getTokenDomain`). */
  tokenDomain: TokenDomain;
  payee: Address;
  amount: bigint;
  sessionKeyX: Hex;
  sessionKeyY: Hex;
  closeDelay: bigint;
  /** 32 random bytes; with payer, payee and token it makes the channel id. */
  salt: Hex;
  validAfter: bigint;
  /** Unix seconds, exclusive (EIP-3009). */
  validBefore: bigint;
};

/**
 * The payer's one signature that opens a channel: an EIP-3009 ReceiveWithAuthorization of the deposit to
 * the TollgateChannels contract whose nonce commits to the payee, token, session key, close delay and
 * salt. Returns the signature, the authorization and the channel id it will open.
 *
 * @example
 * const open = await signChannelOpen(account, { chainId, channels, tokenDomain, payee, amount, … });
 */
export async function signChannelOpen(
  signer: TypedDataSigner,
  p: SignChannelOpenParameters,
): Promise<{ signature: Hex; authorization: TransferAuthorization; channelId: Hex }> {
  const token = p.tokenDomain.verifyingContract;
  const authorization: TransferAuthorization = {
    from: signer.address,
    to: p.channels,
    value: p.amount,
    validAfter: p.validAfter,
    validBefore: p.validBefore,
    nonce: computeChannelOpenNonce({ ...p, token }),
  };
  const signature = await signer.signTypedData({
    domain: p.tokenDomain,
    types: receiveWithAuthorizationTypes,
    primaryType: "ReceiveWithAuthorization",
    message: authorization,
  });
  const channelId = computeChannelId({ ...p, payer: signer.address, token });
  return { signature, authorization, channelId };
}
