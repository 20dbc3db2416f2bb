/**
 * The payer's credential for reading its own payment back from the facilitator (docs/protocol.md, "Payment proof":
 * only the payer and the payee may read a proof). Header:
 *
 *   `X-Tollgate-Payer-Auth: <t>.<signature>`
 *
 * where `t` is the signing time in Unix seconds and `signature` the payer's EIP-191 (`personal_sign`)
 * signature, 0x-hex of 65 bytes, over `payerReadMessage({ method, path, t })`. `path` is the path
 * relative to the facilitator's base URL (`/payments/0x…`), so a facilitator mounted under a prefix,
 * or behind a proxy, checks the same text its client signed.
 *
 * What a captured header allows: the same method on the same path (one payment's record, which the
 * captured request's own response carried anyway) until `t + PAYER_READ_MAX_AGE_SECONDS`; nothing
 * else, because the text names the method and the path. The signer is recovered, not named, so the
 * facilitator needs no lookup to check it (~2 ms: fine off the payment path).
 */
import type { Hex } from "viem";
import { SignatureSchema } from "./address.ts";
import { TollgateError } from "./errors.ts";

/** The header a payer's read-back carries. */
export const PAYER_AUTH_HEADER = "X-Tollgate-Payer-Auth";

/** How old a signed read may be when it arrives. Short: a read is signed just before it is sent. */
export const PAYER_READ_MAX_AGE_SECONDS = 60;

/** How far in the future `t` may lie (the payer's clock running ahead of the facilitator's). */
export const PAYER_READ_MAX_SKEW_SECONDS = 30;

/** The exact text the payer signs; signer and verifier both build it here. */
export function payerReadMessage(p: { method: string; path: string; t: number }): string {
  return ["Tollgate payer read", `${p.method.toUpperCase()} ${p.path}`, `Time: ${p.t}`].join("\n");
}

/** `<t>.<signature>`. */
export function formatPayerAuth(t: number, signature: Hex): string {
  return `${t}.${signature}`;
}

/**
 * Splits a header value into its time and signature without checking either against a clock or a
 * key. Throws `Unauthorized` (the answer a facilitator gives) for anything malformed.
 */
export function parsePayerAuth(value: string): { t: number; signature: Hex } {
  const match = /^([0-9]{1,12})\.(0x[0-9a-fA-F]{130})$/.exec(value.trim());
  const signature = SignatureSchema.safeParse(match?.[2]);
  if (match === null || !signature.success) {
    throw new TollgateError("Unauthorized", `${PAYER_AUTH_HEADER} must be <unix seconds>.<0x signature>`, {
      details: { reason: "malformed_payer_auth" },
    });
  }
  return { t: Number(match[1]), signature: signature.data };
}

/** Whether `t` is inside the accepted window around `now` (both Unix seconds). */
export function isFreshPayerAuth(t: number, now: number): boolean {
  return t <= now + PAYER_READ_MAX_SKEW_SECONDS && t >= now - PAYER_READ_MAX_AGE_SECONDS;
}
