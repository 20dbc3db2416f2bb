/**
 * The memo (docs/protocol.md, "Memo"): the gate's stateless reference to one 402 offer,
 * `base64url(json) + "." + base64url(hmacSha256(secret, json))`.
 *
 * This module holds the wire format only; the HMAC is computed and checked by the gate, which owns the
 * secret. The MAC input is the UTF-8 bytes of `json`, which are exactly the bytes the first part
 * decodes to, so a verifier never re-serializes anything.
 */
import { type Hex, hexToBytes, sha256 } from "viem";
import { z } from "zod";
import { AddressSchema } from "./address.ts";
import { AtomicAmountSchema } from "./amount.ts";
import { base64UrlDecode, base64UrlEncode, utf8Decode, utf8Encode } from "./base64.ts";
import { canonicalJson } from "./canonicalJson.ts";
import { TollgateError } from "./errors.ts";
import { keccak256OfText } from "./fastKeccak.ts";
import { NetworkSchema } from "./network.ts";
import { parseWire } from "./parseWire.ts";

/**
 * Longest memo accepted anywhere. A memo rides inside the proof header (8 KiB) and the EIP-3009
 * nonce derivation; 2048 characters leave room for a request path of several hundred characters.
 */
export const MAX_MEMO_LENGTH = 2048;

/** Length of the MAC part: base64url of a 32-byte HMAC-SHA256 tag. */
const MAC_TEXT_LENGTH = 43;

/**
 * The random part `r`: 96 bits as unpadded base64url, exactly 16 characters (12 bytes fill 16
 * base64 digits with no spare bits). Chosen over hex (24 characters) to keep memos short.
 */
export const MemoRandomSchema = z.string().regex(/^[A-Za-z0-9_-]{16}$/, {
  error: "expected 12 random bytes as 16 base64url characters",
});

/**
 * `q`: the first 16 bytes of SHA-256 over the request's query text (without `?`, exactly as sent) as
 * unpadded base64url, 22 characters. A hash keeps the memo short whatever the query's length.
 */
export const MemoQuerySchema = z.string().regex(/^[A-Za-z0-9_-]{22}$/, {
  error: "expected 16 bytes of a query hash as 22 base64url characters",
});

/**
 * The claims a memo binds (docs/protocol.md, "Memo"). Single letters because the memo travels in every header.
 * `q` is present exactly when the request had a query: a route priced by a function may price by it,
 * so a proof bought for one query does not pay for another (docs/protocol.md).
 */
export const MemoPayloadSchema = z.strictObject({
  /** HTTP method, upper case. */
  m: z.string().regex(/^[A-Z]{1,16}$/, { error: "expected an upper-case HTTP method" }),
  /**
   * Request path without query, as `URL.pathname` gives it: percent-encoded visible ASCII, so JSON
   * writes it unescaped. With the 1024 cap, every valid payload fits in `MAX_MEMO_LENGTH`.
   */
  p: z
    .string()
    .max(1024)
    .regex(/^\/[\x21\x23-\x5b\x5d-\x7e]*$/, { error: "expected a percent-encoded absolute path" }),
  /** Hash of the query (`memoQueryHash`); absent for a request without one. */
  q: MemoQuerySchema.optional(),
  /** Amount in the token's smallest unit. */
  a: AtomicAmountSchema,
  /** payTo address. */
  t: AddressSchema,
  /** Network. */
  n: NetworkSchema,
  /** Token address. */
  k: AddressSchema,
  /** Expiry, Unix seconds: the gate refuses the memo after this instant. */
  e: z.int().positive(),
  /** 96 bits of randomness so two offers never share a memo (and so a nonce). */
  r: MemoRandomSchema,
});
export type MemoPayload = z.infer<typeof MemoPayloadSchema>;

/** A memo's text: `<base64url json>.<base64url 32-byte MAC>`, at most `MAX_MEMO_LENGTH` characters. */
export const MemoSchema = z
  .string()
  .max(MAX_MEMO_LENGTH)
  .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/, { error: "expected a memo `<base64url>.<base64url MAC>`" });
export type Memo = z.infer<typeof MemoSchema>;

/**
 * A memo's `q` for a request's query text (without the `?`, as sent): `undefined` for no query or an
 * empty one, else `base64url(sha256(utf8(query))[0..16])`.
 */
export function memoQueryHash(query: string): string | undefined {
  if (query === "") return undefined;
  return base64UrlEncode(hexToBytes(sha256(utf8Encode(query))).subarray(0, 16));
}

/**
 * The EIP-3009 nonce that binds a transfer to a memo (docs/protocol.md, "Signed payment"): `keccak256(utf8(memo))`.
 * One memo, one nonce: the token contract refuses the second use of a nonce, so a memo pays once.
 */
export function memoNonce(memo: string): Hex {
  return keccak256OfText(memo);
}

/**
 * The first part of a memo and the exact text its MAC covers: `encoded = base64url(json)` with
 * `json = canonicalJson(payload)`.
 */
export function encodeMemoPayload(payload: MemoPayload): { json: string; encoded: string } {
  const json = canonicalJson(parseWire(MemoPayloadSchema, payload, { what: "memo payload" }));
  return { json, encoded: base64UrlEncode(json) };
}

/** Joins a first part and its 32-byte MAC into memo text. Throws `InvalidRequest` if over the length cap. */
export function joinMemo(encodedPayload: string, mac: Uint8Array): Memo {
  if (mac.length !== 32) {
    throw new TollgateError("InvalidRequest", "a memo MAC is 32 bytes (HMAC-SHA256)", {
      details: { length: mac.length },
    });
  }
  const memo = `${encodedPayload}.${base64UrlEncode(mac)}`;
  return parseWire(MemoSchema, memo, { what: "memo" });
}

export type SplitMemo = {
  /** The first part, as sent. */
  encodedPayload: string;
  /** The bytes the first part decodes to: the MAC input. */
  payloadBytes: Uint8Array;
  /** The parsed claims. Not yet authenticated: check `mac` before trusting them. */
  payload: MemoPayload;
  /** The 32-byte MAC. */
  mac: Uint8Array;
};

/**
 * Splits and parses memo text without authenticating it. Throws `InvalidPaymentProof` for anything
 * that is not a well-formed memo, since a memo only ever reaches a gate inside a payment.
 */
export function splitMemo(memo: string): SplitMemo {
  const shape = MemoSchema.safeParse(memo);
  if (!shape.success) {
    throw new TollgateError("InvalidPaymentProof", "memo is malformed", {
      details: { reason: "memo_format" },
    });
  }
  const dot = memo.indexOf(".");
  const encodedPayload = memo.slice(0, dot);
  const macText = memo.slice(dot + 1);
  try {
    const payloadBytes = base64UrlDecode(encodedPayload);
    const mac = base64UrlDecode(macText);
    const json: unknown = JSON.parse(utf8Decode(payloadBytes));
    const payload = parseWire(MemoPayloadSchema, json, { code: "InvalidPaymentProof", what: "memo payload" });
    if (mac.length !== 32 || macText.length !== MAC_TEXT_LENGTH) throw new Error("bad MAC length");
    return { encodedPayload, payloadBytes, payload, mac };
  } catch (cause) {
    if (cause instanceof TollgateError && cause.code === "InvalidPaymentProof") throw cause;
    throw new TollgateError("InvalidPaymentProof", "memo is malformed", {
      details: { reason: "memo_encoding" },
      cause,
    });
  }
}
