import type { Address, Hex } from "viem";
import { permitTypes, type TokenDomain } from "./eip712Types.ts";
import type { TypedDataSigner } from "./typedDataSigner.ts";

/**
 * Signs an EIP-2612 permit letting `spender` pull `value` from the signer. `nonce` is the token's
 * current `nonces(owner)` (`getPermitNonce`).
 */
export function signPermit(
  signer: TypedDataSigner,
  {
    domain,
    spender,
    value,
    nonce,
    deadline,
  }: { domain: TokenDomain; spender: Address; value: bigint; nonce: bigint; deadline: bigint },
): Promise<Hex> {
  return signer.signTypedData({
    domain,
    types: permitTypes,
    primaryType: "Permit",
    message: { owner: signer.address, spender, value, nonce, deadline },
  });
}
