import fc from "fast-check";
import { keccak256, stringToBytes } from "viem";
import { beforeAll, describe, expect, it } from "vitest";
import {
  keccak256Bytes,
  keccak256Hex,
  keccak256HexInJavaScript,
  keccak256OfText,
  keccakImplementation,
  keccakReady,
} from "./fastKeccak.ts";
import { memoNonce } from "./memo.ts";

describe("the hot paths' keccak256", () => {
  beforeAll(async () => {
    await keccakReady;
  });

  it("answers with the WebAssembly keccak once it is compiled, and its JavaScript fallback agrees", () => {
    expect(keccakImplementation()).toBe("wasm");
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => {
        expect(keccak256HexInJavaScript(bytes)).toBe(keccak256(bytes));
      }),
      { numRuns: 300 },
    );
  });

  it("keccak256OfText equals viem's keccak256 of the UTF-8 bytes for any text, memos, non-ASCII and lone surrogates included", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 600 }), (text) => {
        expect(keccak256OfText(text)).toBe(keccak256(stringToBytes(text)));
      }),
      { numRuns: 500 },
    );
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 80 }), (text) => {
        expect(keccak256OfText(text)).toBe(keccak256(stringToBytes(text)));
      }),
      { numRuns: 300 },
    );
    const memo = `${"a".repeat(300)}.${"b".repeat(43)}`;
    // The EIP-3009 nonce every party derives from a memo is this hash (docs/protocol.md, "Signed payment").
    expect(memoNonce(memo)).toBe(keccak256(stringToBytes(memo)));
    expect(keccak256OfText("")).toBe("0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
  });

  it("keccak256Bytes equals viem's keccak256 of the bytes, at every length around the rate's edges", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), (bytes) => {
        expect(keccak256Bytes(bytes)).toEqual(keccak256(bytes, "bytes"));
        expect(keccak256Hex(bytes)).toBe(keccak256(bytes));
      }),
      { numRuns: 500 },
    );
    for (const length of [0, 1, 31, 32, 33, 64, 66, 135, 136, 137, 224, 272]) {
      const bytes = Uint8Array.from({ length }, (_, i) => (i * 7 + length) & 0xff);
      expect(keccak256Bytes(bytes)).toEqual(keccak256(bytes, "bytes"));
    }
  });
});
