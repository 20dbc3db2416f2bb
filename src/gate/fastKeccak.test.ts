import fc from "fast-check";
import { keccak256, stringToBytes } from "viem";
import { describe, expect, it } from "vitest";
import { memoNonce } from "../protocol/memo.ts";
import { keccak256OfText } from "./fastKeccak.ts";

describe("keccak256OfText (the gate's replay-key hash)", () => {
  it("equals viem's keccak256 of the UTF-8 bytes for any text, memos and non-ASCII included", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 600 }), (text) => {
        expect(keccak256OfText(text)).toBe(keccak256(stringToBytes(text)));
      }),
      { numRuns: 500 },
    );
    const memo = `${"a".repeat(300)}.${"b".repeat(43)}`;
    expect(keccak256OfText(memo)).toBe(memoNonce(memo));
    expect(keccak256OfText("")).toBe("0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
  });
});
