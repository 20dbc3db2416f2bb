import type { Hex } from "viem";
import { receiveWithAuthorizationTypes, type TokenDomain } from "../../signers/eip712Types.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";
import type { TypedDataSigner } from "../../signers/typedDataSigner.ts";
import { type ChannelDomain, computeChannelTopUpNonce } from "./channelHashes.ts";

export type SignChannelTopUpParameters = ChannelDomain & {
  tokenDomain: TokenDomain;
  channelId: Hex;
  amount: bigint;
  /** 32 random bytes, distinct per top-up. */
  salt: Hex;
  validAfter: bigint;
  validBefore: bigint;
};

/** The payer's ReceiveWithAuthorization that adds `amount` to its channel (`topUpChannelWithAuthorization`). */
export async function signChannelTopUp(
  signer: TypedDataSigner,
  p: SignChannelTopUpParameters,
): Promise<{ signature: Hex; authorization: TransferAuthorization }> {
  const authorization: TransferAuthorization = {
    from: signer.address,
    to: p.channels,
    value: p.amount,
    validAfter: p.validAfter,
    validBefore: p.validBefore,
    nonce: computeChannelTopUpNonce(p),
  };
  const signature = await signer.signTypedData({
    domain: p.tokenDomain,
    types: receiveWithAuthorizationTypes,
    primaryType: "ReceiveWithAuthorization",
    message: authorization,
  });
  return { signature, authorization };
}
