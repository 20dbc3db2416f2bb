/**
 * JSON-in-a-header codecs: `X-PAYMENT`, `X-PAYMENT-RESPONSE` and the x402 v2 headers all carry
 * `base64(utf8(JSON))` (standard alphabet, as x402's own encoder writes it).
 */
import type { z } from "zod";
import { base64Decode, base64Encode, utf8Decode } from "./base64.ts";
import { TollgateError } from "./errors.ts";
import { parseWire } from "./parseWire.ts";

/** Largest header value Tollgate writes or reads: 8 KiB, under common proxy limits. */
export const MAX_HEADER_BYTES = 8192;

/** Names of the headers of docs/protocol.md; HTTP header names are case-insensitive. */
export const HeaderName = {
  /** Client → gate: `base64(JSON(PaymentProof))` (docs/protocol.md, "Payment proof"). */
  Payment: "X-PAYMENT",
  /** Gate → client on a paid 200: `base64(JSON(PaymentResponse))` (docs/protocol.md, "Payment proof"). */
  PaymentResponse: "X-PAYMENT-RESPONSE",
  /** Client → gate: decimal subscription id (docs/protocol.md, "Subscription requests"). */
  Subscription: "X-Tollgate-Sub",
  /** Client → gate: sub-auth token (docs/protocol.md, "Subscription requests"). */
  SubscriptionAuth: "X-Tollgate-Sub-Auth",
  /**
   * Gate → subscriber on a metered request served under its subscription: the units this request
   * counted (decimal). Sent only in answer to the subscriber's own authenticated request.
   */
  Units: "X-Tollgate-Units",
  /**
   * Gate → subscriber, with `X-Tollgate-Units`: the overage this request was charged, smallest unit
   * (decimal; `0` within the included units). Settled on chain later, in a batch.
   */
  OverageCharge: "X-Tollgate-Overage",
  /** x402 v2, gate → client on 402: `base64(JSON(X402PaymentRequired))` (docs/protocol.md, "x402 v2"). */
  X402PaymentRequired: "PAYMENT-REQUIRED",
  /** x402 v2, client → gate: `base64(JSON(X402PaymentPayload))`. */
  X402PaymentSignature: "PAYMENT-SIGNATURE",
  /** x402 v2, gate → client: `base64(JSON(X402SettleResponse))`. */
  X402PaymentResponse: "PAYMENT-RESPONSE",
  /** Seconds to wait, on 429 and 503 (docs/protocol.md, "Errors"). */
  RetryAfter: "Retry-After",
} as const;
export type HeaderName = (typeof HeaderName)[keyof typeof HeaderName];

export type JsonHeaderOptions = {
  /** Largest accepted header value in bytes; `MAX_HEADER_BYTES` unless given. */
  maxBytes?: number;
};

/**
 * `base64(utf8(JSON.stringify(value)))`. Throws `HeaderTooLarge` when the result exceeds the cap, so
 * an oversized header fails where it is built rather than at a proxy or peer.
 *
 * @example
 * headers.set(HeaderName.Payment, encodeJsonHeader(proof));
 */
export function encodeJsonHeader(value: unknown, options: JsonHeaderOptions = {}): string {
  const maxBytes = options.maxBytes ?? MAX_HEADER_BYTES;
  const json = JSON.stringify(value);
  if (json === undefined) throw new TollgateError("InvalidEncoding", "header value has no JSON form");
  const header = base64Encode(json);
  if (header.length > maxBytes) {
    throw new TollgateError("HeaderTooLarge", `header value is ${header.length} bytes, over ${maxBytes}`, {
      details: { bytes: header.length, maxBytes },
    });
  }
  return header;
}

/**
 * Decodes a JSON header and parses it with `schema`.
 *
 * Throws `TollgateError` with code
 * - `HeaderTooLarge` over `maxBytes`, checked before any decoding work;
 * - `InvalidEncoding` when the value is not strict base64, not UTF-8 or not JSON;
 * - `InvalidRequest` when the JSON fails the schema (`details.issues` summarises why).
 *
 * Surrounding spaces and tabs are ignored, as HTTP does not count them as part of a field value.
 *
 * @example
 * const proof = decodeJsonHeader(request.headers.get(HeaderName.Payment) ?? "", PaymentProofSchema);
 */
export function decodeJsonHeader<T>(
  header: string,
  schema: z.ZodType<T>,
  options: JsonHeaderOptions = {},
): T {
  const maxBytes = options.maxBytes ?? MAX_HEADER_BYTES;
  if (typeof header !== "string") throw new TollgateError("InvalidEncoding", "header value is not text");
  // `length` counts UTF-16 units, never more than UTF-8 bytes; non-ASCII fails base64 below anyway.
  if (header.length > maxBytes) {
    throw new TollgateError("HeaderTooLarge", `header value is over ${maxBytes} bytes`, {
      details: { maxBytes },
    });
  }
  const text = utf8Decode(base64Decode(header.replace(/^[ \t]+|[ \t]+$/g, "")));
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new TollgateError("InvalidEncoding", "header value is not base64 of JSON", { cause });
  }
  return parseWire(schema, json, { what: "header value" });
}

export type SafeDecodeResult<T> = { ok: true; value: T } | { ok: false; error: TollgateError };

/** `decodeJsonHeader` as data: never throws, whatever the input. */
export function safeDecodeJsonHeader<T>(
  header: string,
  schema: z.ZodType<T>,
  options: JsonHeaderOptions = {},
): SafeDecodeResult<T> {
  try {
    return { ok: true, value: decodeJsonHeader(header, schema, options) };
  } catch (error) {
    if (error instanceof TollgateError) return { ok: false, error };
    // Unreachable by construction (every fault above is a TollgateError), kept so the promise holds.
    return {
      ok: false,
      error: new TollgateError("InvalidEncoding", "header value could not be decoded", { cause: error }),
    };
  }
}
