import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { base64UrlEncode, utf8Encode } from "./base64.ts";
import { TollgateError } from "./errors.ts";
import {
  encodeMemoPayload,
  joinMemo,
  MAX_MEMO_LENGTH,
  type MemoPayload,
  MemoPayloadSchema,
  MemoSchema,
  memoNonce,
  memoQueryHash,
  splitMemo,
} from "./memo.ts";

const SECRET = "gate-secret-for-tests";
const payload: MemoPayload = {
  m: "GET",
  p: "/v1/forecast",
  a: "500000",
  t: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  n: "eip155:31337",
  k: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  e: 1763800300,
  r: base64UrlEncode(Uint8Array.from({ length: 12 }, (_, i) => i * 17)),
};

function issue(claims: MemoPayload): string {
  const { json, encoded } = encodeMemoPayload(claims);
  return joinMemo(encoded, createHmac("sha256", SECRET).update(json, "utf8").digest());
}

describe("memo", () => {
  it("round-trips: the split claims are the issued ones and the MAC covers the decoded bytes", () => {
    const memo = issue(payload);
    expect(MemoSchema.parse(memo)).toBe(memo);
    const split = splitMemo(memo);
    expect(split.payload).toEqual(payload);
    const expected = createHmac("sha256", SECRET).update(split.payloadBytes).digest();
    expect(Buffer.from(split.mac).equals(expected)).toBe(true);
    expect(`${split.encodedPayload}.${base64UrlEncode(split.mac)}`).toBe(memo);
  });

  it("serializes the claims canonically, whatever their key order", () => {
    const reordered = Object.fromEntries(Object.entries(payload).reverse()) as MemoPayload;
    expect(encodeMemoPayload(reordered)).toEqual(encodeMemoPayload(payload));
    expect(encodeMemoPayload(payload).json.startsWith('{"a":"500000","e":1763800300,"k":')).toBe(true);
  });

  it("derives the EIP-3009 nonce as keccak256 of the memo's UTF-8 bytes", () => {
    expect(memoNonce("")).toBe("0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
    const memo = issue(payload);
    expect(memoNonce(memo)).toMatch(/^0x[0-9a-f]{64}$/);
    expect(memoNonce(memo)).not.toBe(memoNonce(issue({ ...payload, r: "AAAAAAAAAAAAAAAA" })));
  });

  it("requires 96 random bits as 16 base64url characters", () => {
    expect(MemoPayloadSchema.safeParse({ ...payload, r: "AAAAAAAAAAAAAAA" }).success).toBe(false);
    expect(MemoPayloadSchema.safeParse({ ...payload, r: "00".repeat(12) }).success).toBe(false);
    expect(MemoPayloadSchema.safeParse({ ...payload, r: "AAAAAAAAAAAAAAA=" }).success).toBe(false);
  });

  it("refuses claims with unknown fields, lower-case methods or relative paths", () => {
    expect(MemoPayloadSchema.safeParse({ ...payload, x: 1 }).success).toBe(false);
    expect(MemoPayloadSchema.safeParse({ ...payload, m: "get" }).success).toBe(false);
    expect(MemoPayloadSchema.safeParse({ ...payload, p: "v1/forecast" }).success).toBe(false);
  });

  it("fits the largest valid claims within MAX_MEMO_LENGTH", () => {
    const largest: MemoPayload = {
      ...payload,
      m: "M".repeat(16),
      p: `/${"~".repeat(1023)}`,
      q: memoQueryHash("size=large"),
      a: (2n ** 256n - 1n).toString(),
      n: `eip155:${Number.MAX_SAFE_INTEGER}`,
      e: Number.MAX_SAFE_INTEGER,
    };
    expect(issue(largest).length).toBeLessThanOrEqual(MAX_MEMO_LENGTH);
    expect(MemoPayloadSchema.safeParse({ ...largest, p: `${largest.p}x` }).success).toBe(false);
  });

  it("binds a query by a 22-character hash, and no query by no field", () => {
    const q = memoQueryHash("size=large");
    expect(q).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(memoQueryHash("size=small")).not.toBe(q);
    expect(memoQueryHash("")).toBeUndefined();
    const memo = issue({ ...payload, q });
    expect(splitMemo(memo).payload.q).toBe(q);
    expect(MemoPayloadSchema.safeParse({ ...payload, q: "size=large" }).success).toBe(false);
  });

  it("refuses paths JSON would escape or a URL would have percent-encoded", () => {
    for (const p of ['/a"b', "/a\\b", "/a b", "/é", "/a\nb"]) {
      expect(MemoPayloadSchema.safeParse({ ...payload, p }).success, p).toBe(false);
    }
    expect(MemoPayloadSchema.safeParse({ ...payload, p: "/a%20b/c;d=1" }).success).toBe(true);
  });

  it("refuses memos longer than MAX_MEMO_LENGTH, at join and at parse", () => {
    expect(() => joinMemo("A".repeat(MAX_MEMO_LENGTH), new Uint8Array(32))).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
    const tooLong = `${"A".repeat(MAX_MEMO_LENGTH)}.${"A".repeat(43)}`;
    expect(MemoSchema.safeParse(tooLong).success).toBe(false);
    expect(() => splitMemo(tooLong)).toThrow(expect.objectContaining({ code: "InvalidPaymentProof" }));
  });

  it("splits a tampered memo without judging it: authenticating the MAC is the gate's job", () => {
    const memo = issue(payload);
    const forged = `${encodeMemoPayload({ ...payload, a: "1" }).encoded}${memo.slice(memo.indexOf("."))}`;
    const split = splitMemo(forged);
    expect(split.payload.a).toBe("1");
    const expected = createHmac("sha256", SECRET).update(split.payloadBytes).digest();
    expect(Buffer.from(split.mac).equals(expected)).toBe(false);
  });

  it("refuses a MAC that is not 32 bytes", () => {
    expect(() => joinMemo("e30", new Uint8Array(16))).toThrow(TollgateError);
  });

  it("answers garbage with InvalidPaymentProof, never another exception", () => {
    const macText = base64UrlEncode(new Uint8Array(32));
    const inputs = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.jsonValue({ maxDepth: 2 }).map((v) => `${base64UrlEncode(JSON.stringify(v) ?? "")}.${macText}`),
      fc.string({ unit: fc.constantFrom(..."Aw_-."), maxLength: 80 }),
      fc.uint8Array({ maxLength: 100 }).map((b) => `${base64UrlEncode(b)}.${macText}`),
      fc
        .record({ m: fc.string(), p: fc.string(), a: fc.string() })
        .map((v) => `${base64UrlEncode(utf8Encode(JSON.stringify(v)))}.${macText}`),
    );
    fc.assert(
      fc.property(inputs, (memo) => {
        try {
          splitMemo(memo);
        } catch (error) {
          expect(error).toBeInstanceOf(TollgateError);
          expect((error as TollgateError).code).toBe("InvalidPaymentProof");
        }
      }),
      { numRuns: 1500 },
    );
  });
});
