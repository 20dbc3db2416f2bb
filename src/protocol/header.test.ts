import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { base64Encode } from "./base64.ts";
import { TollgateError } from "./errors.ts";
import {
  decodeJsonHeader,
  encodeJsonHeader,
  HeaderName,
  MAX_HEADER_BYTES,
  safeDecodeJsonHeader,
} from "./header.ts";
import { PaymentProofSchema } from "./paymentProof.ts";

const Sample = z.object({ a: z.string(), n: z.number() });

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (error instanceof TollgateError) return error.code;
    throw error;
  }
}

describe("JSON headers", () => {
  it("round-trips JSON values through base64", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        const header = encodeJsonHeader(value);
        expect(header).toBe(Buffer.from(JSON.stringify(value), "utf8").toString("base64"));
        expect(decodeJsonHeader(header, z.unknown())).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
  });

  it("parses with the schema and ignores surrounding spaces", () => {
    const header = encodeJsonHeader({ a: "x", n: 1 });
    expect(decodeJsonHeader(` ${header}\t`, Sample)).toEqual({ a: "x", n: 1 });
  });

  it("refuses a header over 8 KiB with HeaderTooLarge before decoding it", () => {
    expect(MAX_HEADER_BYTES).toBe(8192);
    // Not base64 at all: only the size check can have produced HeaderTooLarge.
    expect(codeOf(() => decodeJsonHeader("!".repeat(8193), Sample))).toBe("HeaderTooLarge");
    const big = encodeJsonHeader({ a: "x".repeat(7000), n: 1 }, { maxBytes: 100_000 });
    expect(big.length).toBeGreaterThan(8192);
    expect(codeOf(() => decodeJsonHeader(big, Sample))).toBe("HeaderTooLarge");
    expect(decodeJsonHeader(big, Sample, { maxBytes: 100_000 }).a).toHaveLength(7000);
  });

  it("refuses to encode a header over the cap", () => {
    expect(codeOf(() => encodeJsonHeader({ a: "x".repeat(7000) }))).toBe("HeaderTooLarge");
  });

  it("refuses non-base64 and non-JSON with InvalidEncoding", () => {
    expect(codeOf(() => decodeJsonHeader("not base64!", Sample))).toBe("InvalidEncoding");
    expect(codeOf(() => decodeJsonHeader(base64Encode("{not json"), Sample))).toBe("InvalidEncoding");
    expect(codeOf(() => decodeJsonHeader(base64Encode(Uint8Array.of(0xff, 0xfe)), Sample))).toBe(
      "InvalidEncoding",
    );
  });

  it("refuses JSON that fails the schema with InvalidRequest and says where", () => {
    const header = encodeJsonHeader({ a: 1, n: "x" });
    const result = safeDecodeJsonHeader(header, Sample);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.code).toBe("InvalidRequest");
    expect(result.error.details?.issues).toEqual([
      { path: "a", message: expect.any(String) },
      { path: "n", message: expect.any(String) },
    ]);
  });

  it("reports a throwing transform as InvalidRequest rather than leaking the exception", () => {
    const Throwing = z.string().transform(() => {
      throw new RangeError("boom");
    });
    expect(codeOf(() => decodeJsonHeader(encodeJsonHeader("x"), Throwing))).toBe("InvalidRequest");
  });

  it("answers random strings, random bytes and random JSON with a specific code, never another exception", () => {
    const inputs = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.uint8Array({ maxLength: 300 }).map((bytes) => base64Encode(bytes)),
      fc.jsonValue({ maxDepth: 3 }).map((value) => encodeJsonHeader(value, { maxBytes: 1 << 20 })),
      fc.string({ unit: fc.constantFrom(..."ABCxyz019+/="), maxLength: 40 }),
      fc.integer({ min: 8193, max: 20_000 }).map((n) => "A".repeat(n)),
    );
    fc.assert(
      fc.property(inputs, (header) => {
        const result = safeDecodeJsonHeader(header, PaymentProofSchema);
        expect(result.ok).toBe(false);
        if (result.ok) return;
        expect(["HeaderTooLarge", "InvalidEncoding", "InvalidRequest"]).toContain(result.error.code);
        expect(codeOf(() => decodeJsonHeader(header, PaymentProofSchema))).toBe(result.error.code);
      }),
      { numRuns: 2000 },
    );
  });

  it("names the headers of the protocol", () => {
    expect(HeaderName).toMatchObject({
      Payment: "X-PAYMENT",
      PaymentResponse: "X-PAYMENT-RESPONSE",
      Subscription: "X-Tollgate-Sub",
      SubscriptionAuth: "X-Tollgate-Sub-Auth",
      X402PaymentRequired: "PAYMENT-REQUIRED",
      X402PaymentSignature: "PAYMENT-SIGNATURE",
      X402PaymentResponse: "PAYMENT-RESPONSE",
    });
  });
});
