import { checksummedAddress } from "../../../gate/addressCache.ts";
import { utf8Decode } from "../../../protocol/base64.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { MAX_HEADER_BYTES, safeDecodeJsonHeader } from "../../../protocol/header.ts";
import { MAX_MEMO_LENGTH } from "../../../protocol/memo.ts";
import { isNetwork } from "../../../protocol/network.ts";
import type { IssueSummary } from "../../../protocol/parseWire.ts";
import { type PaymentProof, PaymentProofSchema } from "../../../protocol/paymentProof.ts";

export type ParsedPaymentProof = { ok: true; proof: PaymentProof } | { ok: false; reason: string };

/**
 * Reads an `X-PAYMENT` header value (docs/protocol.md, "Payment proof": `base64(JSON(proof))`) into a typed proof, or a
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
  const fast = fastPaymentProof(fastJsonOf(header));
  if (fast !== undefined) return { ok: true, proof: fast };
  // Anything the fast reader does not accept goes through the schema, which refuses it with a reason
  // (or accepts a spelling the fast reader leaves to it, such as surrounding blanks).
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

// The hot path: hand-written checks that accept a subset of what `PaymentProofSchema` accepts (every
// well-formed proof as Tollgate's facilitator writes it) and give the same value the schema gives. What
// they do not accept is read again by the schema, so nothing the schema refuses gets through.

/**
 * JSON of strict standard base64 (padded or not) of UTF-8, decoded natively; `undefined` otherwise.
 * No alphabet check is needed first: the text accepted is the canonical encoding of what was decoded,
 * or that encoding without its padding, and canonical base64 holds only `A-Za-z0-9+/` and final `=`.
 */
function fastJsonOf(header: string): unknown {
  if (header.length === 0 || header.length > MAX_HEADER_BYTES) return undefined;
  const bytes = Buffer.from(header, "base64");
  // Node's decoder is lenient (it skips what it does not know, reads `-_` as `+/`); the one canonical
  // spelling of these bytes must be the text received.
  const canonical = bytes.toString("base64");
  if (canonical !== header) {
    let end = canonical.length;
    while (end > 0 && canonical.charCodeAt(end - 1) === 61) end--;
    if (end !== header.length || !canonical.startsWith(header)) return undefined;
  }
  try {
    return JSON.parse(utf8Decode(bytes));
  } catch {
    return undefined;
  }
}

const PROOF_FIELDS = new Set([
  "v",
  "kid",
  "scheme",
  "network",
  "token",
  "amount",
  "payer",
  "payTo",
  "memo",
  "tx",
  "iat",
  "exp",
  "sig",
]);
const KEY_ID = /^[A-Za-z0-9._~-]{1,128}$/;
const SIGNATURE = /^[A-Za-z0-9_-]{85}[AQgw]$/;
const MEMO = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/;
const HEX32 = /^0x[0-9a-fA-F]{64}$/;
const ATOMIC = /^(0|[1-9][0-9]*)$/;
/** Amounts up to 2^53 − 1 are taken here; longer ones (still valid up to uint256) go to the schema. */
const MAX_FAST_AMOUNT_DIGITS = 15;

const isSeconds = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;

/** The proof `PaymentProofSchema` would give for `value`, when the fast checks accept it. */
export function fastPaymentProof(value: unknown): PaymentProof | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const o = value as Record<string, unknown>;
  let fields = 0;
  for (const key in o) {
    if (!PROOF_FIELDS.has(key)) return undefined;
    fields++;
  }
  if (fields !== PROOF_FIELDS.size) return undefined;
  const { v, kid, scheme, network, amount, memo, tx, iat, exp, sig } = o;
  if (v !== "1" || scheme !== "exact" || !isNetwork(network)) return undefined;
  if (typeof kid !== "string" || !KEY_ID.test(kid)) return undefined;
  if (typeof sig !== "string" || !SIGNATURE.test(sig)) return undefined;
  if (typeof memo !== "string" || memo.length > MAX_MEMO_LENGTH || !MEMO.test(memo)) return undefined;
  if (typeof tx !== "string" || !HEX32.test(tx)) return undefined;
  if (typeof amount !== "string" || amount.length > MAX_FAST_AMOUNT_DIGITS || !ATOMIC.test(amount))
    return undefined;
  if (!isSeconds(iat) || !isSeconds(exp)) return undefined;
  const token = checksummedAddress(o.token);
  const payer = checksummedAddress(o.payer);
  const payTo = checksummedAddress(o.payTo);
  if (token === undefined || payer === undefined || payTo === undefined) return undefined;
  return {
    v,
    kid,
    scheme,
    network,
    token,
    amount,
    payer,
    payTo,
    memo,
    tx: tx.toLowerCase() as `0x${string}`,
    iat,
    exp,
    sig,
  };
}
