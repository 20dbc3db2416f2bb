import type { Hex } from "viem";
import { cancelAuthorizationTypes, type TokenDomain } from "./eip712Types.ts";
import type { TypedDataSigner } from "./typedDataSigner.ts";

/** Signs an EIP-3009 CancelAuthorization for one of the signer's unused nonces. */
export function signCancelAuthorization(
  signer: TypedDataSigner,
  { domain, nonce }: { domain: TokenDomain; nonce: Hex },
): Promise<Hex> {
  return signer.signTypedData({
    domain,
    types: cancelAuthorizationTypes,
    primaryType: "CancelAuthorization",
    message: { authorizer: signer.address, nonce },
  });
}
