import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { signProofFor } from "../../../../test/support/signProofFor.ts";
import { proofKeyFromSeed } from "../../../facilitator/proofKeys.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { encodeJsonHeader, MAX_HEADER_BYTES, safeDecodeJsonHeader } from "../../../protocol/header.ts";
import { PaymentProofSchema } from "../../../protocol/paymentProof.ts";
import { fastPaymentProof, parsePaymentProof, safeParsePaymentProof } from "./parsePaymentProof.ts";

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

describe("the fast proof reader (the gate's hot path)", () => {
  const schemaReading = (value: unknown) => {
    const parsed = PaymentProofSchema.safeParse(value);
    return parsed.success ? parsed.data : undefined;
  };
  const fieldValue = fc.oneof(
    fc.string(),
    fc.integer(),
    fc.double(),
    fc.constant(null),
    fc.boolean(),
    fc.constantFrom(
      "1",
      "exact",
      "eip155:0",
      "eip155:01",
      "0x5fbdb2315678afecb367f032d93f642f64180aa3",
      "0x5FBDB2315678AFECB367F032D93F642F64180AA3",
      "0x5fbdb2315678afecb367f032d93f642f64180aa",
      `0x${"AB".repeat(32)}`,
      "00",
      "-1",
      "1e3",
      "1".repeat(79),
      "1".repeat(16),
      -1,
      2 ** 53,
      1.5,
      "sig",
      `${"A".repeat(85)}B`,
      `${"A".repeat(85)}Q`,
      `${"a".repeat(2100)}.${"b".repeat(43)}`,
    ),
  );

  it("accepts only what PaymentProofSchema accepts, and reads it to the same value", () => {
    const fields = Object.keys(proof);
    fc.assert(
      fc.property(
        fc.constantFrom(...fields, "extra", "__proto__", "constructor"),
        fc.option(fieldValue, { nil: undefined }),
        (field, value) => {
          const mutated: Record<string, unknown> = JSON.parse(JSON.stringify(proof));
          if (value === undefined) delete mutated[field];
          else mutated[field] = value;
          const fromJson = JSON.parse(JSON.stringify(mutated));
          const fast = fastPaymentProof(fromJson);
          const schema = schemaReading(fromJson);
          if (fast !== undefined) expect(fast).toEqual(schema);
          // And through the header: the reader's verdict is the schema's, whichever path decided.
          const read = safeParsePaymentProof(encodeJsonHeader(fromJson));
          expect(read.ok ? read.proof : undefined).toEqual(schema);
        },
      ),
      { numRuns: 1_000 },
    );
  });

  it("reads lower-case and upper-case addresses and hex to the schema's checksummed, lower-case value", () => {
    const spelled = {
      ...proof,
      token: proof.token.toUpperCase().replace("0X", "0x"),
      payer: proof.payer.toLowerCase(),
      tx: proof.tx.toUpperCase().replace("0X", "0x"),
    };
    expect(fastPaymentProof(spelled)).toEqual(proof);
    expect(safeParsePaymentProof(encodeJsonHeader(spelled))).toEqual({ ok: true, proof });
  });

  it("gives every second spelling of the header's base64 the schema's verdict, never a fast acceptance", () => {
    const header = encodeJsonHeader(proof);
    const unpadded = header.replace(/=+$/, "");
    const spellings = [
      header,
      unpadded,
      ` ${header}\t`,
      `${header}=`,
      `${unpadded}A`,
      header.replace(/[A-Za-z0-9+/](=*)$/, (last, pad) => `${last === "A" ? "B" : "A"}${pad}`),
      header.replaceAll("+", "-").replaceAll("/", "_"),
      `${header.slice(0, 10)}\n${header.slice(10)}`,
      Buffer.from(`\uFEFF${JSON.stringify(proof)}`).toString("base64"),
      Buffer.from(`${JSON.stringify(proof)} `).toString("base64"),
    ];
    for (const spelling of spellings) {
      const slow = safeDecodeJsonHeader(spelling, PaymentProofSchema, { maxBytes: MAX_HEADER_BYTES });
      const read = safeParsePaymentProof(spelling);
      expect({ spelling, ok: read.ok }).toEqual({ spelling, ok: slow.ok });
      if (read.ok && slow.ok) expect(read.proof).toEqual(slow.value);
    }
  });

  it("refuses a header over 8 KiB before decoding it, on the fast path too", () => {
    const padded = Buffer.from(JSON.stringify({ ...proof, kid: "k".repeat(7_000) })).toString("base64");
    expect(safeParsePaymentProof(padded)).toEqual({
      ok: false,
      reason: `X-PAYMENT header is over ${MAX_HEADER_BYTES} bytes`,
    });
  });
});
