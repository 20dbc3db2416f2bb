/**
 * Addresses and hex strings on the wire. Addresses are accepted in any case and come out checksummed
 * (EIP-55), so that output is stable; compare them with `sameAddress`, never `===` on raw input.
 * Other hex (hashes, nonces, signatures) comes out lowercased for the same reason.
 */
import { type Address, getAddress, type Hex } from "viem";
import { z } from "zod";

const ADDRESS_PATTERN = /^0x[0-9a-fA-F]{40}$/;

/**
 * A 20-byte address in any letter case; parses to its EIP-55 checksummed form. A mixed-case input
 * whose checksum is wrong is still accepted (its bytes are unambiguous) and re-checksummed.
 */
export const AddressSchema = z
  .string()
  .regex(ADDRESS_PATTERN, { error: "expected a 0x-prefixed 20-byte hex address" })
  .transform((text): Address => getAddress(text.toLowerCase()));

/** Case-insensitive address equality, as docs/protocol.md asks of every comparison of addresses. */
export function sameAddress(a: string, b: string): boolean {
  // Equal text first: addresses read back from one source are usually spelled alike.
  return a === b || a.toLowerCase() === b.toLowerCase();
}

function hexOfBytes(pattern: RegExp, what: string) {
  return z
    .string()
    .regex(pattern, { error: `expected ${what}` })
    .transform((text): Hex => text.toLowerCase() as Hex);
}

/** Any whole number of bytes as 0x-hex (possibly `0x` for none); lowercased. */
export const HexSchema = hexOfBytes(/^0x(?:[0-9a-fA-F]{2})*$/, "0x-prefixed hex of whole bytes");

/** 8 bytes as 0x-hex (a channel's tag); lowercased. */
export const Hex8Schema = hexOfBytes(/^0x[0-9a-fA-F]{16}$/, "0x-prefixed 8-byte hex");

/** 32 bytes as 0x-hex (hashes, EIP-3009 nonces, transaction hashes); lowercased. */
export const Hex32Schema = hexOfBytes(/^0x[0-9a-fA-F]{64}$/, "0x-prefixed 32-byte hex");

/** A 65-byte secp256k1 signature `r ‖ s ‖ v` as 0x-hex, as viem's `signTypedData`/`signMessage` return. */
export const SignatureSchema = hexOfBytes(/^0x[0-9a-fA-F]{130}$/, "a 0x-prefixed 65-byte signature");
