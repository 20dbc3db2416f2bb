/**
 * keccak256 for hot paths. Every payment hashes its memo into the EIP-3009 nonce
 * (`keccak256(utf8(memo))`, docs/protocol.md, "Signed payment") — the payer when it signs, the facilitator when it checks
 * the authorization, the gate for its replay key — and the facilitator hashes two EIP-712 blocks per
 * recovered signature and one per transaction it signs.
 *
 * Two implementations, same function, same output (a property test compares both with viem's):
 * hash-wasm's WebAssembly keccak, 4–6× faster than js-sha3 (a memo 1.5 against 7.6 µs, a 33 KB batch
 * transaction 118 against 691 µs: docs/benchmarks.md), and js-sha3 in JavaScript, which answers until the
 * WebAssembly module is compiled (it starts compiling when this module loads; `keccakReady` resolves
 * once it is in use) and for good where WebAssembly cannot run. Both are synchronous, so callers never
 * wait. No `Buffer` is required, so payers outside Node can use it as well.
 */

import { createKeccak, type IHasher } from "hash-wasm";
import sha3 from "js-sha3";
import type { Hex } from "viem";

const encoder = new TextEncoder();

/** The compiled WebAssembly hasher, once ready. Calls are synchronous, so one instance serves all. */
let wasm: IHasher | undefined;

/**
 * Resolves once the WebAssembly keccak answers (or, where it cannot be compiled, once js-sha3 is known
 * to stay). Never rejects. Nothing needs to wait for it: it exists for benchmarks and tests.
 */
export const keccakReady: Promise<void> = createKeccak(256).then(
  (hasher) => {
    wasm = hasher;
  },
  () => undefined,
);

/** `keccak256(utf8(text))` as lower-case 0x-hex, equal to viem's `keccak256(stringToBytes(text))`. */
export function keccak256OfText(text: string): Hex {
  return keccak256Hex(encoder.encode(text));
}

/** `keccak256(bytes)` as lower-case 0x-hex, equal to viem's `keccak256(bytes)`. */
export function keccak256Hex(bytes: Uint8Array): Hex {
  if (wasm === undefined) return `0x${sha3.keccak256(bytes)}`;
  wasm.init();
  wasm.update(bytes);
  return `0x${wasm.digest("hex")}`;
}

/** `keccak256(bytes)` as 32 bytes, equal to viem's `keccak256(bytes, "bytes")`. */
export function keccak256Bytes(bytes: Uint8Array): Uint8Array {
  if (wasm === undefined) return new Uint8Array(sha3.keccak256.arrayBuffer(bytes));
  wasm.init();
  wasm.update(bytes);
  return wasm.digest("binary");
}

/** Which implementation answers now: `"wasm"` once `keccakReady` has found it usable, else `"javascript"`. */
export const keccakImplementation = (): "wasm" | "javascript" => (wasm === undefined ? "javascript" : "wasm");

/** js-sha3's `keccak256(bytes)` as 0x-hex, whichever implementation is in use (tests compare both). */
export const keccak256HexInJavaScript = (bytes: Uint8Array): Hex => `0x${sha3.keccak256(bytes)}`;
