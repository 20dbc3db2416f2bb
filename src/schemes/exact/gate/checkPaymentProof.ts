/**
 * The gate's check of a payment proof (docs/protocol.md, "Payment proof"), short of consuming its memo.
 *
 * Order matters for cost: the cheap field and HMAC checks run before the signature check, so a forged
 * or mismatched proof is refused without touching the key cache, the Ed25519 code or the network.
 */
import { hash, type KeyObject, verify } from "node:crypto";
import { type MemoSecret, openMemo } from "../../../gate/memo.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { base64UrlDecode } from "../../../protocol/base64.ts";
import { type Clock, unixSeconds } from "../../../protocol/clock.ts";
import type { MemoPayload } from "../../../protocol/memo.ts";
import type { PaymentProof } from "../../../protocol/paymentProof.ts";
import type { ProofKeyResolver } from "./proofKeyResolver.ts";

/** What the request being served requires of a proof. */
export type ProofExpectation = {
  method: string;
  /** The request's normalized path (`normalizeRequestTarget`). */
  path: string;
  /** The request's query without `?` (default `""`): the memo's `q` must be its hash, or absent for none. */
  query?: string;
  /**
   * The least the request costs now (its route's cheapest one-time price); a proof for less is refused
   * even when its memo names this request. Absent: no floor (for checks outside a gate).
   */
  minimumAmount?: bigint;
  payTo: string;
  network: string;
  token: string;
};

export type SignatureVerdict = { valid: true } | { valid: false; reason: string };

/**
 * Checks `sig` (and that the facilitator stands by the proof). May throw `ChainUnavailable` when it
 * cannot tell; the gate then answers 503 and leaves the memo unconsumed.
 */
export type ProofSignatureCheck = (proof: PaymentProof) => Promise<SignatureVerdict>;

export type CheckPaymentProofContext = {
  memoSecret: MemoSecret;
  clock: Clock;
  expected: ProofExpectation;
  checkSignature: ProofSignatureCheck;
  /**
   * Seconds a proof may have been issued after its memo expired (default 60): settlement confirms a
   * block after the payer signed, and the facilitator's clock is not the gate's.
   */
  graceSeconds?: number;
};

export type ProofVerdict = { valid: true; memo: MemoPayload } | { valid: false; reason: string };

/**
 * The gate's fast path (its hot-path check, named apart from the specification's standalone
 * `verifyPaymentProof(proof)`, which answers a boolean and needs no memo secret).
 * Every check of docs/protocol.md, "Payment proof" except the final consume: not expired, memo issued by this gate and
 * for this request (method, path, query), proof terms equal to the memo's and the gate's, an amount
 * covering the request's price, signature by a trusted key.
 * Never throws for a bad proof (that is a `{ valid: false, reason }`); throws only when the signature
 * check cannot be carried out.
 *
 * @example
 * const verdict = await checkPaymentProof(proof, {
 *   memoSecret, clock, expected: { method: "GET", path: "/report", payTo, network, token },
 *   checkSignature: checkSignatureWithKeys(createStaticKeyResolver(jwks)),
 * });
 */
export async function checkPaymentProof(
  proof: PaymentProof,
  context: CheckPaymentProofContext,
): Promise<ProofVerdict> {
  const terms = checkProofTerms(proof, context);
  if (!terms.valid) return terms;
  const signature = await context.checkSignature(proof);
  if (!signature.valid) return signature;
  return terms;
}

/**
 * Every check of `checkPaymentProof` but the signature, synchronously: the gate's hot path runs these,
 * then the signature check, without a promise between them when the key is at hand.
 */
export function checkProofTerms(
  proof: PaymentProof,
  context: Omit<CheckPaymentProofContext, "checkSignature">,
): ProofVerdict {
  const { expected } = context;
  const now = unixSeconds(context.clock);
  if (proof.exp <= now) return { valid: false, reason: "proof has expired" };

  const opened = openMemo(context.memoSecret, proof.memo);
  if (!opened.ok) return { valid: false, reason: opened.reason };
  const memo = opened.payload;

  // The memo says what this gate priced; the proof says what the facilitator settled. They must agree
  // with each other and with the request being served.
  if (memo.m !== expected.method.toUpperCase() || memo.p !== expected.path) {
    return { valid: false, reason: "proof was issued for another route" };
  }
  if (memo.q !== queryHashOf(expected.query ?? "")) {
    return { valid: false, reason: "proof was issued for another query" };
  }
  if (memo.a !== proof.amount) return { valid: false, reason: "proof amount differs from the memo's" };
  if (expected.minimumAmount !== undefined && BigInt(proof.amount) < expected.minimumAmount) {
    return {
      valid: false,
      reason: `proof pays ${proof.amount}, less than this request's price ${expected.minimumAmount}`,
    };
  }
  if (!sameAddress(memo.t, proof.payTo) || !sameAddress(memo.t, expected.payTo)) {
    return { valid: false, reason: "proof pays another payee" };
  }
  if (memo.n !== proof.network || memo.n !== expected.network) {
    return { valid: false, reason: "proof is for another network" };
  }
  if (!sameAddress(memo.k, proof.token) || !sameAddress(memo.k, expected.token)) {
    return { valid: false, reason: "proof is for another token" };
  }
  // An offer stands until its memo expires; a payment settled well after that was made against a
  // price the gate no longer promised (the payer should have asked for a fresh 402).
  if (proof.iat > memo.e + (context.graceSeconds ?? 60)) {
    return { valid: false, reason: "payment was settled after the offer expired" };
  }
  return { valid: true, memo };
}

/**
 * Local verification: Ed25519 over the canonical JSON of every field but `sig`, with the key the
 * facilitator publishes under `kid`.
 *
 * Invariant: `proof` came out of `PaymentProofSchema`, so its fields are already normalized and the
 * canonical JSON of the unsigned fields is exactly `proofSigningInput(proof)`, without parsing twice.
 */
export function checkSignatureWithKeys(keys: ProofKeyResolver): ProofSignatureCheck {
  return async (proof) => {
    const key = await keys.resolve(proof.kid);
    if (key === undefined) return { valid: false, reason: "proof is signed by an unknown key" };
    return verifyProofSignature(proof, key);
  };
}

/** Ed25519 over `proofSignedText(proof)` with `key`, synchronously (`checkSignatureWithKeys` once the key is known). */
export function verifyProofSignature(proof: PaymentProof, key: KeyObject): SignatureVerdict {
  let signature: Uint8Array;
  if (SIGNATURE_TEXT.test(proof.sig)) {
    // The one spelling of 64 bytes (86 characters, no unused bits set): Node's decoder is exact here.
    signature = Buffer.from(proof.sig, "base64url");
  } else {
    try {
      signature = base64UrlDecode(proof.sig);
    } catch {
      return { valid: false, reason: "proof signature is not base64url" };
    }
  }
  const ok = verify(null, Buffer.from(proofSignedText(proof), "utf8"), key, signature);
  return ok ? { valid: true } : { valid: false, reason: "proof signature does not verify" };
}

const SIGNATURE_TEXT = /^[A-Za-z0-9_-]{85}[AQgw]$/;

/** Remote verification: the facilitator's `POST /verify`. Its faults propagate as typed errors. */
export function checkSignatureWithFacilitator(
  facilitator: Pick<FacilitatorClient, "verify">,
): ProofSignatureCheck {
  return async (proof) => {
    const verdict = await facilitator.verify(proof);
    if (verdict.valid) return { valid: true };
    return { valid: false, reason: `facilitator refused the proof: ${verdict.reason ?? "invalid"}` };
  };
}

/**
 * The text `sig` covers, `canonicalJson` of every field but `sig` (docs/protocol.md, "Payment proof"), written out for
 * the gate's hot path. `PaymentProofSchema` is strict and requires every field, so a parsed proof has
 * exactly these keys; they are listed here in canonical order (UTF-16 code units: `payTo` < `payer`).
 * A test checks this against `canonicalJson` and the schema's keys, so a new field cannot be missed.
 */
export function proofSignedText(proof: PaymentProof): string {
  const text = JSON.stringify;
  return (
    `{"amount":${text(proof.amount)},"exp":${text(proof.exp)},"iat":${text(proof.iat)},` +
    `"kid":${text(proof.kid)},"memo":${text(proof.memo)},"network":${text(proof.network)},` +
    `"payTo":${text(proof.payTo)},"payer":${text(proof.payer)},"scheme":${text(proof.scheme)},` +
    `"token":${text(proof.token)},"tx":${text(proof.tx)},"v":${text(proof.v)}}`
  );
}

/**
 * `memoQueryHash(query)` with Node's native SHA-256 (the protocol's version runs in JavaScript, for
 * every runtime): the first 16 bytes of `sha256(utf8(query))` in base64url, `undefined` for no query.
 * A test compares the two.
 */
export function queryHashOf(query: string): string | undefined {
  if (query === "") return undefined;
  return hash("sha256", query, "buffer").subarray(0, 16).toString("base64url");
}
