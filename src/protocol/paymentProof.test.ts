import { generateKeyPairSync, sign, verify } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { base64UrlDecode, base64UrlEncode } from "./base64.ts";
import { decodeJsonHeader, encodeJsonHeader } from "./header.ts";
import {
  Ed25519SignatureSchema,
  type PaymentProof,
  PaymentProofSchema,
  PaymentResponseSchema,
  proofSigningInput,
  type UnsignedPaymentProof,
  UnsignedPaymentProofSchema,
} from "./paymentProof.ts";

const { privateKey, publicKey } = generateKeyPairSync("ed25519");

const unsigned: UnsignedPaymentProof = {
  v: "1",
  kid: "test-key-1",
  scheme: "exact",
  network: "eip155:31337",
  token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  amount: "500000",
  payer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  memo: `e30.${"A".repeat(43)}`,
  tx: `0x${"ab".repeat(32)}`,
  iat: 1763800000,
  exp: 1763800300,
};

function signed(body: UnsignedPaymentProof): PaymentProof {
  const sig = base64UrlEncode(sign(null, Buffer.from(proofSigningInput(body), "utf8"), privateKey));
  return { ...body, sig };
}

describe("payment proof", () => {
  it("signs the canonical JSON of every field but sig", () => {
    expect(proofSigningInput(unsigned)).toBe(
      '{"amount":"500000","exp":1763800300,"iat":1763800000,"kid":"test-key-1","memo":"e30.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","network":"eip155:31337","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","payer":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","scheme":"exact","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","tx":"0xabababababababababababababababababababababababababababababababab","v":"1"}',
    );
    const proof = signed(unsigned);
    expect(proofSigningInput(proof)).toBe(proofSigningInput(unsigned));
  });

  it("round-trips through the X-PAYMENT header and still verifies", () => {
    const proof = signed(unsigned);
    const received = decodeJsonHeader(encodeJsonHeader(proof), PaymentProofSchema);
    expect(received).toEqual(proof);
    const ok = verify(
      null,
      Buffer.from(proofSigningInput(received), "utf8"),
      publicKey,
      base64UrlDecode(received.sig),
    );
    expect(ok).toBe(true);
  });

  it("gives the same signing input for addresses and hashes in any letter case", () => {
    const shouty = {
      ...unsigned,
      payer: unsigned.payer.toLowerCase() as `0x${string}`,
      token: `0x${unsigned.token.slice(2).toUpperCase()}` as `0x${string}`,
      tx: `0x${"AB".repeat(32)}` as `0x${string}`,
    };
    expect(proofSigningInput(shouty)).toBe(proofSigningInput(unsigned));
  });

  it("fails verification once any field changes", () => {
    const proof = signed(unsigned);
    const tampered = { ...proof, amount: "500001" };
    const ok = verify(
      null,
      Buffer.from(proofSigningInput(tampered), "utf8"),
      publicKey,
      base64UrlDecode(proof.sig),
    );
    expect(ok).toBe(false);
  });

  it("refuses fields this version does not know, and a missing sig", () => {
    const proof = signed(unsigned);
    expect(PaymentProofSchema.safeParse({ ...proof, planId: "3" }).success).toBe(false);
    expect(UnsignedPaymentProofSchema.safeParse({ ...unsigned, sig: proof.sig }).success).toBe(false);
    expect(PaymentProofSchema.safeParse(unsigned).success).toBe(false);
    expect(PaymentProofSchema.safeParse({ ...proof, v: "2" }).success).toBe(false);
    expect(PaymentProofSchema.safeParse({ ...proof, iat: 1.5 }).success).toBe(false);
  });

  it("refuses a malformed proof when computing the signing input", () => {
    expect(() => proofSigningInput({ ...unsigned, amount: "-1" })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
  });

  it("accepts exactly the base64url texts of 64-byte signatures", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 64, maxLength: 64 }), (bytes) => {
        expect(Ed25519SignatureSchema.safeParse(base64UrlEncode(bytes)).success).toBe(true);
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom(..."ABQgw_-9="), minLength: 84, maxLength: 88 }),
        (text) => {
          let canonical = false;
          try {
            canonical = base64UrlDecode(text).length === 64;
          } catch {}
          expect(Ed25519SignatureSchema.safeParse(text).success).toBe(canonical);
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe("PaymentResponseSchema", () => {
  it("round-trips the X-PAYMENT-RESPONSE object", () => {
    const response = {
      success: true,
      transaction: `0x${"cd".repeat(32)}`,
      network: "eip155:31337",
      payer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    };
    expect(decodeJsonHeader(encodeJsonHeader(response), PaymentResponseSchema)).toEqual(response);
  });
});
