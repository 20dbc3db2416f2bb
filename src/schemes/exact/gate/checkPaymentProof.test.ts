import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { memoQueryHash } from "../../../protocol/memo.ts";
import {
  type PaymentProof,
  PaymentProofSchema,
  proofSigningInput,
  UnsignedPaymentProofSchema,
} from "../../../protocol/paymentProof.ts";
import { proofSignedText, queryHashOf } from "./checkPaymentProof.ts";

const hex = (bytes: number) =>
  fc.uint8Array({ minLength: bytes, maxLength: bytes }).map((b) => `0x${Buffer.from(b).toString("hex")}`);
const base64Url = (min: number, max: number) =>
  fc.stringMatching(new RegExp(`^[A-Za-z0-9_-]{${min},${max}}$`));

/** Any proof `PaymentProofSchema` accepts, addresses in any letter case. */
const proofs = fc.record({
  v: fc.constant("1" as const),
  kid: fc.stringMatching(/^[A-Za-z0-9._~-]{1,40}$/),
  scheme: fc.constant("exact" as const),
  network: fc.constantFrom("eip155:31337", "eip155:8453", "eip155:84532"),
  token: hex(20),
  amount: fc.bigInt({ min: 0n, max: 2n ** 256n - 1n }).map(String),
  payer: hex(20).map((a) => a.toUpperCase().replace("0X", "0x")),
  payTo: hex(20),
  memo: fc.tuple(base64Url(1, 300), base64Url(43, 43)).map(([a, b]) => `${a}.${b}`),
  tx: hex(32),
  iat: fc.nat(),
  exp: fc.nat(),
  sig: fc.constant(`${"A".repeat(85)}A`),
});

describe("proofSignedText", () => {
  it("is exactly the canonical JSON the facilitator signs, for any proof", () => {
    fc.assert(
      fc.property(proofs, (raw) => {
        // What the gate holds after parsing X-PAYMENT, against what the facilitator signs.
        const proof = PaymentProofSchema.parse(raw);
        expect(proofSignedText(proof)).toBe(proofSigningInput(raw as PaymentProof));
      }),
      { numRuns: 500 },
    );
  });

  it("covers every field of the proof schema but sig", () => {
    const proof = Object.fromEntries(
      Object.keys(UnsignedPaymentProofSchema.shape).map((key) => [key, `value-of-${key}`]),
    ) as unknown as PaymentProof;
    const written = Object.keys(JSON.parse(proofSignedText(proof)));
    expect(written).toEqual(Object.keys(UnsignedPaymentProofSchema.shape).sort());
  });
});

describe("queryHashOf", () => {
  it("is memoQueryHash for any query, the empty one included", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.constant(""), fc.string(), fc.stringMatching(/^[\x21-\x7e]{0,200}$/)),
        (query) => {
          expect(queryHashOf(query)).toBe(memoQueryHash(query));
        },
      ),
    );
  });
});
