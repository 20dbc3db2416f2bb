import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  base64Decode,
  base64Encode,
  base64UrlDecode,
  base64UrlEncode,
  utf8Decode,
  utf8Encode,
} from "./base64.ts";
import { TollgateError } from "./errors.ts";

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (error instanceof TollgateError) return error.code;
    throw error;
  }
}

describe("base64 (standard)", () => {
  it("matches RFC 4648 §10 test vectors", () => {
    const vectors = ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"];
    const inputs = ["", "f", "fo", "foo", "foob", "fooba", "foobar"];
    expect(inputs.map((s) => base64Encode(s))).toEqual(vectors);
    expect(vectors.map((v) => utf8Decode(base64Decode(v)))).toEqual(inputs);
  });

  it("agrees with Buffer and round-trips every byte string, with or without padding", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        const text = base64Encode(bytes);
        expect(text).toBe(Buffer.from(bytes).toString("base64"));
        expect(base64Decode(text)).toEqual(bytes);
        expect(base64Decode(text.replace(/=+$/, ""))).toEqual(bytes);
      }),
      { numRuns: 1000 },
    );
  });

  it.each([
    ["Zg=", "short padding"],
    ["Zg===", "too much padding"],
    ["Z===", "padding in the last quantum's second place"],
    ["Zg==Zg==", "padding in the middle"],
    ["Zh==", "non-zero unused bits"],
    ["Zm9=", "non-zero unused bits"],
    ["Z", "impossible length"],
    ["Zm9vY", "impossible length"],
    ["Zm9v\n", "newline"],
    [" Zm9v", "space"],
    ["Zm9v-_", "base64url characters"],
    ["Zm9vYmFy\u00e9", "non-ASCII"],
  ])("refuses %j (%s) with InvalidEncoding", (text) => {
    expect(codeOf(() => base64Decode(text))).toBe("InvalidEncoding");
  });
});

describe("base64url", () => {
  it("agrees with Buffer and round-trips every byte string", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        const text = base64UrlEncode(bytes);
        expect(text).toBe(Buffer.from(bytes).toString("base64url"));
        expect(base64UrlDecode(text)).toEqual(bytes);
      }),
      { numRuns: 1000 },
    );
  });

  it("encodes strings as UTF-8", () => {
    expect(base64UrlEncode("ü?>")).toBe(Buffer.from("ü?>", "utf8").toString("base64url"));
    expect(utf8Decode(base64UrlDecode(base64UrlEncode('{"a":"€"}')))).toBe('{"a":"€"}');
  });

  it.each([
    ["Zg==", "padding"],
    ["Zm9v+/", "standard-alphabet characters"],
    ["Zh", "non-zero unused bits"],
    ["Z", "impossible length"],
    ["Zm 9v", "space"],
  ])("refuses %j (%s) with InvalidEncoding", (text) => {
    expect(codeOf(() => base64UrlDecode(text))).toBe("InvalidEncoding");
  });

  it("gives each byte string exactly one accepted spelling", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom(..."AQgwZh-_09"), maxLength: 12 }), (text) => {
        const code = codeOf(() => base64UrlDecode(text));
        if (code === undefined) expect(base64UrlEncode(base64UrlDecode(text))).toBe(text);
        else expect(code).toBe("InvalidEncoding");
      }),
      { numRuns: 2000 },
    );
  });
});

describe("decoders on garbage", () => {
  it("either decode or throw InvalidEncoding, for any string", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: "binary", maxLength: 24 })), (text) => {
        for (const decode of [base64Decode, base64UrlDecode]) {
          expect([undefined, "InvalidEncoding"]).toContain(codeOf(() => decode(text)));
        }
      }),
      { numRuns: 800 },
    );
  });
});

describe("UTF-8", () => {
  it("round-trips well-formed strings", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (text) => {
        expect(utf8Decode(utf8Encode(text))).toBe(text);
      }),
      { numRuns: 500 },
    );
  });

  it("refuses malformed UTF-8 with InvalidEncoding", () => {
    expect(codeOf(() => utf8Decode(Uint8Array.of(0xc3, 0x28)))).toBe("InvalidEncoding");
    expect(codeOf(() => utf8Decode(Uint8Array.of(0xff)))).toBe("InvalidEncoding");
  });
});
