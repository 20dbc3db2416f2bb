import { describe, expect, it } from "vitest";
import { signProofFor } from "../../test/support/signProofFor.ts";
import { proofKeyFromSeed } from "../facilitator/proofKeys.ts";
import { TollgateError } from "../protocol/errors.ts";
import { encodeJsonHeader } from "../protocol/header.ts";
import { parsePaymentProof, safeParsePaymentProof } from "./parsePaymentProof.ts";

const key = proofKeyFromSeed(new Uint8Array(32).fill(7));
const proof = signProofFor(
  key,
  {
    scheme: "exact",
    network: "eip155:31337",
    token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
    amount: "500000",
    payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    memo: `${"a".repeat(40)}.${"b".repeat(43)}`,
  },
  1_763_800_000,
);

describe("parsePaymentProof (the specification's call)", () => {
  it("returns the proof an X-PAYMENT header value carries", () => {
    const headerValue = encodeJsonHeader(proof);
    expect(parsePaymentProof(headerValue)).toEqual(proof);
  });

  it.each([
    ["not base64", "%%%"],
    ["base64 of something else", Buffer.from('{"hello":1}').toString("base64")],
    ["an empty header", ""],
    ["a value over 8 KiB", "A".repeat(9000)],
    ["a number", 42],
    ["nothing", undefined],
  ])("throws a typed InvalidPaymentProof error for %s, never a TypeError", (_what, headerValue) => {
    let thrown: unknown;
    try {
      parsePaymentProof(headerValue);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(TollgateError);
    expect(thrown).toMatchObject({ code: "InvalidPaymentProof", details: { reason: expect.any(String) } });
    expect((thrown as Error).message).toMatch(/^invalid payment proof: X-PAYMENT header/);
  });

  it("keeps the never-throwing reader as safeParsePaymentProof", () => {
    expect(safeParsePaymentProof(encodeJsonHeader(proof))).toEqual({ ok: true, proof });
    expect(safeParsePaymentProof("%%%")).toEqual({
      ok: false,
      reason: "X-PAYMENT header is not base64 of UTF-8 JSON",
    });
  });
});
