import fc from "fast-check";
import { getAddress } from "viem";
import { describe, expect, it } from "vitest";
import { AddressSchema, Hex32Schema, HexSchema, SignatureSchema, sameAddress } from "./address.ts";

const CHECKSUMMED = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

describe("AddressSchema", () => {
  it("accepts any letter case and outputs the EIP-55 form", () => {
    for (const text of [CHECKSUMMED, CHECKSUMMED.toLowerCase(), `0x${CHECKSUMMED.slice(2).toUpperCase()}`]) {
      expect(AddressSchema.parse(text)).toBe(CHECKSUMMED);
    }
  });

  it("re-checksums a mixed-case address with a wrong checksum instead of failing", () => {
    const wrong = `0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed`;
    expect(AddressSchema.parse(wrong)).toBe(CHECKSUMMED);
  });

  it.each([
    "",
    "0x",
    CHECKSUMMED.slice(0, 41),
    `${CHECKSUMMED}00`,
    CHECKSUMMED.slice(2),
    `0X${CHECKSUMMED.slice(2)}`,
    `0x${"g".repeat(40)}`,
  ])("refuses %j", (text) => {
    expect(AddressSchema.safeParse(text).success).toBe(false);
  });

  it("agrees with viem on every 20-byte value", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 20, maxLength: 20 }), (bytes) => {
        const lower = `0x${Buffer.from(bytes).toString("hex")}`;
        expect(AddressSchema.parse(lower)).toBe(getAddress(lower));
      }),
      { numRuns: 300 },
    );
  });

  it("never throws on arbitrary input", () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        expect(typeof AddressSchema.safeParse(value).success).toBe("boolean");
      }),
      { numRuns: 500 },
    );
  });
});

describe("sameAddress", () => {
  it("compares case-insensitively", () => {
    expect(sameAddress(CHECKSUMMED, CHECKSUMMED.toLowerCase())).toBe(true);
    expect(sameAddress(CHECKSUMMED, `0x${"0".repeat(40)}`)).toBe(false);
  });
});

describe("hex schemas", () => {
  it("lowercases 32-byte hex and refuses other lengths", () => {
    expect(Hex32Schema.parse(`0x${"AB".repeat(32)}`)).toBe(`0x${"ab".repeat(32)}`);
    expect(Hex32Schema.safeParse(`0x${"ab".repeat(31)}`).success).toBe(false);
    expect(Hex32Schema.safeParse(`0x${"ab".repeat(33)}`).success).toBe(false);
    expect(Hex32Schema.safeParse("ab".repeat(32)).success).toBe(false);
  });

  it("accepts 65-byte signatures only", () => {
    expect(SignatureSchema.parse(`0x${"CD".repeat(65)}`)).toBe(`0x${"cd".repeat(65)}`);
    expect(SignatureSchema.safeParse(`0x${"cd".repeat(64)}`).success).toBe(false);
    expect(SignatureSchema.safeParse(`0x${"cd".repeat(66)}`).success).toBe(false);
  });

  it("accepts whole bytes of hex, including none", () => {
    expect(HexSchema.parse("0x")).toBe("0x");
    expect(HexSchema.parse("0xABCD")).toBe("0xabcd");
    expect(HexSchema.safeParse("0xabc").success).toBe(false);
    expect(HexSchema.safeParse("abcd").success).toBe(false);
  });
});
