import { TollgateError } from "../protocol/errors.ts";
import { HeaderName, safeDecodeJsonHeader } from "../protocol/header.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import { type X402PaymentRequired, X402PaymentRequiredSchema } from "../protocol/x402.ts";

/**
 * What a 402 asks for: Tollgate's JSON body (docs/protocol.md, "402 body"), or, from a server that speaks only
 * x402 v2, the `PAYMENT-REQUIRED` header (docs/protocol.md, "x402 v2"). `undefined` for a 402 that is neither.
 */
export type PaymentRequiredOffer =
  | { kind: "tollgate"; body: PaymentRequired }
  | { kind: "x402"; paymentRequired: X402PaymentRequired };

/** Largest 402 body read: 32 options with 2 KiB memos fit comfortably. */
const MAX_BODY_BYTES = 256 * 1024;

/**
 * Reads a 402 response. Consumes the body of `response`: pass a clone to keep the original readable.
 * Never throws for a malformed 402; a Tollgate body wins over the x402 header when both are present.
 */
export async function readPaymentRequired(response: Response): Promise<PaymentRequiredOffer | undefined> {
  if (typeof response?.headers?.get !== "function" || typeof response.text !== "function") {
    throw new TollgateError(
      "InvalidRequest",
      "readPaymentRequired(response): pass the fetch Response of a 402",
    );
  }
  let text: string | undefined;
  try {
    const declared = Number(response.headers.get("content-length") ?? "0");
    if (declared <= MAX_BODY_BYTES) {
      const read = await response.text();
      if (read.length <= MAX_BODY_BYTES) text = read;
    }
  } catch {
    text = undefined;
  }
  if (text !== undefined && text !== "") {
    try {
      const parsed = PaymentRequiredSchema.safeParse(JSON.parse(text));
      if (parsed.success) return { kind: "tollgate", body: parsed.data };
    } catch {
      // Not JSON: perhaps an x402 server with an HTML paywall body.
    }
  }
  const header = response.headers.get(HeaderName.X402PaymentRequired);
  if (header === null) return undefined;
  const decoded = safeDecodeJsonHeader(header, X402PaymentRequiredSchema);
  return decoded.ok ? { kind: "x402", paymentRequired: decoded.value } : undefined;
}
