import type { Address, Hex } from "viem";
import { type TokenDomain, transferWithAuthorizationTypes } from "./eip712Types.ts";
import type { TypedDataSigner } from "./typedDataSigner.ts";

/** The fields of an EIP-3009 authorization. `validAfter`/`validBefore` are unix seconds, both exclusive. */
export type TransferAuthorization = {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  /** 32 random bytes; Tollgate uses keccak256(utf8(memo)) (docs/protocol.md, "Signed payment"). */
  nonce: Hex;
};

/**
 * Signs an EIP-3009 TransferWithAuthorization for `domain`'s token. `authorization.from` must be the
 * signer's address.
 *
 * @example
 * const signature = await signTransferAuthorization(account, {
 *   domain: { name: "USD Coin", version: "2", chainId: 31337, verifyingContract: usd },
 *   authorization: { from: account.address, to: payTo, value: 500_000n, validAfter: 0n, validBefore, nonce },
 * });
 */
export function signTransferAuthorization(
  signer: TypedDataSigner,
  { domain, authorization }: { domain: TokenDomain; authorization: TransferAuthorization },
): Promise<Hex> {
  if (authorization.from.toLowerCase() !== signer.address.toLowerCase()) {
    throw new Error(`authorization.from ${authorization.from} is not the signer ${signer.address}`);
  }
  return signer.signTypedData({
    domain,
    types: transferWithAuthorizationTypes,
    primaryType: "TransferWithAuthorization",
    message: authorization,
  });
}
