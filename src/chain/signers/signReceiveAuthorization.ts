import type { Hex } from "viem";
import { receiveWithAuthorizationTypes, type TokenDomain } from "./eip712Types.ts";
import type { TransferAuthorization } from "./signTransferAuthorization.ts";
import type { TypedDataSigner } from "./typedDataSigner.ts";

/** Signs an EIP-3009 ReceiveWithAuthorization: only the payee (`to`) may submit it. */
export function signReceiveAuthorization(
  signer: TypedDataSigner,
  { domain, authorization }: { domain: TokenDomain; authorization: TransferAuthorization },
): Promise<Hex> {
  if (authorization.from.toLowerCase() !== signer.address.toLowerCase()) {
    throw new Error(`authorization.from ${authorization.from} is not the signer ${signer.address}`);
  }
  return signer.signTypedData({
    domain,
    types: receiveWithAuthorizationTypes,
    primaryType: "ReceiveWithAuthorization",
    message: authorization,
  });
}
