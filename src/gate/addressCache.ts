/**
 * EIP-55 checksummed addresses for the gate's hot path. Checksumming costs a keccak256 in JavaScript;
 * a gate sees the same few addresses again and again (its payee, its token, its regular payers), so
 * results are kept in a bounded map that is emptied when full: a stream of made-up addresses costs the
 * sender what it costs today and cannot grow the gate's memory.
 */
import { type Address, getAddress } from "viem";

const ADDRESS_PATTERN = /^0x[0-9a-fA-F]{40}$/;
const MAX_ENTRIES = 4_096;
let cache = new Map<string, Address>();

/**
 * The checksummed form of `text` when it is a 0x-prefixed 20-byte hex address in any letter case (as
 * `AddressSchema` parses it), else `undefined`.
 */
export function checksummedAddress(text: unknown): Address | undefined {
  if (typeof text !== "string") return undefined;
  const known = cache.get(text);
  if (known !== undefined) return known;
  if (!ADDRESS_PATTERN.test(text)) return undefined;
  const address = getAddress(text.toLowerCase());
  if (cache.size >= MAX_ENTRIES) cache = new Map();
  cache.set(text, address);
  return address;
}
