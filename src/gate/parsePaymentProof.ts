import { TollgateError } from "../protocol/errors.ts";
import { MAX_HEADER_BYTES, safeDecodeJsonHeader } from "../protocol/header.ts";
import type { IssueSummary } from "../protocol/parseWire.ts";
import { type PaymentProof, PaymentProofSchema } from "../protocol/paymentProof.ts";

export type ParsedPaymentProof = { ok: true; proof: PaymentProof } | { ok: false; reason: string };

/**
 * Reads an `X-PAYMENT` header value (DESIGN.md §2.4: `base64(JSON(proof))`) into a typed proof, or a
 * `{ ok: false, reason }` saying which step failed. The gate's own reader.
 *
 * Never throws, whatever the input: values over 8 KiB are refused before any decoding, base64 must be
 * strict (one spelling per byte string), the JSON must be UTF-8, and the object must pass
 * `PaymentProofSchema`, which also refuses unknown fields.
 *
 * @example
 * const parsed = safeParsePaymentProof(request.headers.get("x-payment") ?? "");
 * if (!parsed.ok) return refuse(parsed.reason);
 */
export function safeParsePaymentProof(header: unknown): ParsedPaymentProof {
  if (typeof header !== "string") return { ok: false, reason: "X-PAYMENT header is not text" };
  const decoded = safeDecodeJsonHeader(header, PaymentProofSchema, { maxBytes: MAX_HEADER_BYTES });
  if (decoded.ok) return { ok: true, proof: decoded.value };
  return { ok: false, reason: reasonOf(decoded.error) };
}

/**
 * Reads an `X-PAYMENT` header value into the payment proof it carries (the specification's
 * `parsePaymentProof(headerValue)`). Same checks as `safeParsePaymentProof`; a value that is not a
 * proof throws `TollgateError` with code `InvalidPaymentProof` and `details.reason` naming the step
 * that failed (never a `TypeError`, whatever the input).
 *
 * @example
 * const proof = parsePaymentProof(request.headers.get("x-payment") ?? "");
 * const paid = { payer: proof.payer, amount: BigInt(proof.amount) };
 */
export function parsePaymentProof(headerValue: unknown): PaymentProof {
  const parsed = safeParsePaymentProof(headerValue);
  if (parsed.ok) return parsed.proof;
  throw new TollgateError("InvalidPaymentProof", `invalid payment proof: ${parsed.reason}`, {
    details: { reason: parsed.reason },
  });
}

function reasonOf(error: TollgateError): string {
  switch (error.code) {
    case "HeaderTooLarge":
      return `X-PAYMENT header is over ${MAX_HEADER_BYTES} bytes`;
    case "InvalidEncoding":
      return "X-PAYMENT header is not base64 of UTF-8 JSON";
    default: {
      const issues = error.details?.issues as IssueSummary[] | undefined;
      const first = issues?.[0];
      return first === undefined
        ? "X-PAYMENT header is not a payment proof"
        : `X-PAYMENT header is not a payment proof (${first.path || "proof"}: ${first.message})`;
    }
  }
}
