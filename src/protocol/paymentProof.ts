/**
 * The payment proof (docs/protocol.md, "Payment proof"): what the facilitator signs with Ed25519 once a payment has
 * settled, the client forwards as `X-PAYMENT: base64(JSON(proof))`, and the gate accepts once.
 */
import { z } from "zod";
import { AddressSchema, Hex32Schema } from "./address.ts";
import { AtomicAmountSchema } from "./amount.ts";
import { canonicalJson } from "./canonicalJson.ts";
import { MemoSchema } from "./memo.ts";
import { NetworkSchema } from "./network.ts";
import { parseWire } from "./parseWire.ts";

/** A key id as published in the JWKS: URL-safe text (Tollgate uses RFC 7638 thumbprints). */
export const KeyIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9._~-]{1,128}$/, { error: "expected a URL-safe key id" });

/** An Ed25519 signature (64 bytes) as unpadded base64url: exactly 86 characters. */
export const Ed25519SignatureSchema = z
  .string()
  .regex(/^[A-Za-z0-9_-]{85}[AQgw]$/, { error: "expected a 64-byte signature as base64url" });

/**
 * Every field of a proof except `sig`. Strict: a field this version does not know is refused rather
 * than dropped, because `sig` covers every field and a dropped one could never verify.
 */
export const UnsignedPaymentProofSchema = z.strictObject({
  v: z.literal("1"),
  kid: KeyIdSchema,
  scheme: z.literal("exact"),
  network: NetworkSchema,
  token: AddressSchema,
  amount: AtomicAmountSchema,
  payer: AddressSchema,
  payTo: AddressSchema,
  memo: MemoSchema,
  /** Hash of the settling transaction (a batch transaction may settle several proofs). */
  tx: Hex32Schema,
  /** Issued at, Unix seconds. */
  iat: z.int().nonnegative(),
  /** Expiry, Unix seconds: the gate refuses the proof from this instant on. */
  exp: z.int().nonnegative(),
});
export type UnsignedPaymentProof = z.infer<typeof UnsignedPaymentProofSchema>;

export const PaymentProofSchema = UnsignedPaymentProofSchema.extend({ sig: Ed25519SignatureSchema });
export type PaymentProof = z.infer<typeof PaymentProofSchema>;

/**
 * The exact text `sig` covers: the canonical JSON (keys sorted, no whitespace) of every field but
 * `sig`, after normalizing through `UnsignedPaymentProofSchema` (addresses checksummed, hex
 * lowercased). Signer and verifier therefore agree even if one of them was handed lowercase addresses.
 * The Ed25519 message is the UTF-8 encoding of this string. Throws `InvalidRequest` for a malformed proof.
 */
export function proofSigningInput(proof: UnsignedPaymentProof | PaymentProof): string {
  const { sig: _sig, ...unsigned } = proof as PaymentProof;
  return canonicalJson(parseWire(UnsignedPaymentProofSchema, unsigned, { what: "payment proof" }));
}

/**
 * The `X-PAYMENT-RESPONSE` object a gate adds to a paid 200 (docs/protocol.md, "Payment proof"); the same field names
 * as x402's `PAYMENT-RESPONSE` settle response, so x402 tooling can read it.
 */
export const PaymentResponseSchema = z.object({
  success: z.boolean(),
  transaction: Hex32Schema,
  network: NetworkSchema,
  payer: AddressSchema,
});
export type PaymentResponse = z.infer<typeof PaymentResponseSchema>;
