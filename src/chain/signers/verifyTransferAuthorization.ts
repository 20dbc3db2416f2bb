import { type Address, type Hex, hexToBigInt, isAddressEqual, size } from "viem";
import type { TokenDomain } from "./eip712Types.ts";
import { recoverTransferSigner } from "./recoverTransferSigner.ts";
import type { TransferAuthorization } from "./signTransferAuthorization.ts";

/** secp256k1's group order n; a canonical (low-s) signature has s <= n / 2 (EIP-2). */
const secp256k1n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

/** True when a 65-byte signature's s is in the lower half of the curve order, as the contracts require. */
export function isLowS(signature: Hex): boolean {
  if (size(signature) !== 65) return false;
  const s = hexToBigInt(`0x${signature.slice(66, 130)}`);
  return s > 0n && s <= secp256k1n / 2n;
}

export type VerifyTransferAuthorizationResult =
  | { valid: true }
  | { valid: false; reason: "MalformedSignature" | "HighS" | "WrongSigner" };

/**
 * Checks off chain that an EOA signed `authorization` for `domain` with a low-s signature — what the token
 * will check on chain, minus the nonce, the time window and the balance. (Contract wallets sign with
 * ERC-1271, which only a chain read can check.)
 */
export async function verifyTransferAuthorization({
  domain,
  authorization,
  signature,
}: {
  domain: TokenDomain;
  authorization: TransferAuthorization;
  signature: Hex;
}): Promise<VerifyTransferAuthorizationResult> {
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature)) return { valid: false, reason: "MalformedSignature" };
  if (!isLowS(signature)) return { valid: false, reason: "HighS" };
  let signer: Address | undefined;
  try {
    signer = recoverTransferSigner(domain, authorization, signature);
  } catch {
    return { valid: false, reason: "MalformedSignature" };
  }
  if (signer === undefined) return { valid: false, reason: "MalformedSignature" };
  return isAddressEqual(signer, authorization.from)
    ? { valid: true }
    : { valid: false, reason: "WrongSigner" };
}
