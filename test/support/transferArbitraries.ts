/**
 * fast-check arbitraries for EIP-3009 transfers, shared by the property tests that hold Tollgate's
 * own digest, recovery and signing to viem's (src/chain/signers).
 */
import fc from "fast-check";
import type { Address, Hex } from "viem";

/** secp256k1's group order. */
export const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
export const MAX_UINT256 = (1n << 256n) - 1n;

export const hexOf = (bytes: Uint8Array): Hex => `0x${Buffer.from(bytes).toString("hex")}`;
export const address = fc.uint8Array({ minLength: 20, maxLength: 20 }).map((b) => hexOf(b) as Address);
/** Any uint256, with its edges drawn often. */
export const uint256 = fc.oneof(
  fc.bigInt({ min: 0n, max: MAX_UINT256 }),
  fc.constantFrom(0n, 1n, 10_000n, MAX_UINT256),
);
export const privateKey = fc
  .bigInt({ min: 1n, max: SECP256K1_N - 1n })
  .map((k) => `0x${k.toString(16).padStart(64, "0")}` as Hex);
/** A token's EIP-712 domain: name, version, chain id, contract. */
export const tokenDomain = fc.record({
  name: fc.string({ maxLength: 40 }),
  version: fc.constantFrom("1", "2", "10"),
  chainId: fc.integer({ min: 1, max: 2 ** 40 }),
  verifyingContract: address,
});
/** A `TransferWithAuthorization` message with bigint amounts and times. */
export const transferAuthorization = fc.record({
  from: address,
  to: address,
  value: uint256,
  validAfter: uint256,
  validBefore: uint256,
  nonce: fc.uint8Array({ minLength: 32, maxLength: 32 }).map(hexOf),
});
