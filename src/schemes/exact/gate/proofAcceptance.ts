/**
 * A proof (`X-PAYMENT`) at a gate: accepted once for the request it pays (`acceptProof`, the `exact`
 * part's `accept`), its key handed back or marked used when the handler answered (`complete`), and
 * checked without being consumed (`verifyGateProof`, the gate's `verifyPaymentProof`). The
 * invariants are the `exact` part's (src/schemes/exact/gate.ts).
 */
import type { Address } from "viem";
import { GatePass } from "../../../gate/gatePass.ts";
import { errorResponse, faultResponse } from "../../../gate/gateResponses.ts";
import { type MemoSecret, openMemo } from "../../../gate/memo.ts";
import { proofReplayKey } from "../../../gate/paymentReplayKey.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../../protocol/clock.ts";
import { HeaderName } from "../../../protocol/header.ts";
import type { Network } from "../../../protocol/network.ts";
import type { PaymentProof } from "../../../protocol/paymentProof.ts";
import type { ReplayGuard } from "../../../store/replayGuard.ts";
import type {
  GateSchemeContext,
  SchemeAcceptance,
  SchemeOffer,
  SchemePaymentBase,
  SchemeRequest,
  SchemeRoute,
} from "../../types.ts";
import {
  checkProofTerms,
  type ProofSignatureCheck,
  type SignatureVerdict,
  verifyProofSignature,
} from "./checkPaymentProof.ts";
import { safeParsePaymentProof } from "./parsePaymentProof.ts";
import type { ProofKeyResolver } from "./proofKeyResolver.ts";
import { toPaymentProof } from "./verifyPaymentProof.ts";

/** A one-time payment proven by the facilitator's proof (`X-PAYMENT`). */
export type ProofPayment = SchemePaymentBase & {
  scheme: "exact";
  network: Network;
  /** Hash of the settling transaction. */
  transaction: `0x${string}`;
  memo: string;
  proof: PaymentProof;
};

/** What a gate checks proofs with, fixed per gate. */
export type ProofGate = {
  clock: Clock;
  replayGuard: ReplayGuard;
  logger: GateSchemeContext["logger"];
  memoSecret: MemoSecret;
  payTo: Address;
  network: Network;
  token: Address;
  checkSignature: ProofSignatureCheck;
  /** The key resolver behind `checkSignature` when proofs are verified locally. */
  keys: ProofKeyResolver | undefined;
  /** How long a proof is held in flight for its request (`proofLeaseSeconds`), milliseconds. */
  leaseMs: number;
};

/**
 * Claims a proof's key may have while it lives: the first and two retries after a gate died before
 * answering. Bounds what a host that never reports `complete` gives away per payment.
 */
export const MAX_PROOF_CLAIMS = 3;

/** The least a one-time payment for a route must be now: its cheapest one-time offer. */
export function cheapestOffer(offers: readonly { amount?: bigint | undefined }[]): bigint | undefined {
  let cheapest: bigint | undefined;
  for (const offer of offers) {
    if (offer.amount !== undefined && (cheapest === undefined || offer.amount < cheapest))
      cheapest = offer.amount;
  }
  return cheapest;
}

/** Checks the proof in `header` for `request` and claims its key; passes it, refuses it, or answers 5xx. */
export async function acceptProof(
  gate: ProofGate,
  header: string,
  request: SchemeRequest,
  route: SchemeRoute<SchemeOffer>,
): Promise<SchemeAcceptance> {
  const { method, path } = request;
  const { logger } = gate;
  const parsed = safeParsePaymentProof(header);
  if (!parsed.ok) return refusal(logger, method, path, parsed.reason);
  const proof = parsed.proof;
  const minimumAmount = cheapestOffer(route.offers);
  if (minimumAmount === undefined)
    return refusal(logger, method, path, "this request is not sold for a one-time payment");
  // Computed once per request (one keccak256 of the memo, through `memoNonce`: fastKeccak.ts).
  const replayKey = proofReplayKey(proof);
  let claim: ProofClaim;
  try {
    const terms = checkProofTerms(proof, {
      memoSecret: gate.memoSecret,
      clock: gate.clock,
      expected: {
        method,
        path,
        query: request.query,
        // A proof pays for this request only if it covers this request's price (a route priced by
        // a function may price another query of the same path higher).
        minimumAmount,
        payTo: gate.payTo,
        network: gate.network,
        token: gate.token,
      },
    });
    if (!terms.valid) return refusal(logger, method, path, terms.reason);
    // The key at hand is used without a promise; otherwise (a JWKS not yet read, a key rotated in,
    // remote verification) the check may fetch.
    const key = gate.keys?.known?.(proof.kid);
    const signature: SignatureVerdict =
      key !== undefined ? verifyProofSignature(proof, key) : await gate.checkSignature(proof);
    if (!signature.valid) return refusal(logger, method, path, signature.reason);
    claim = await claimProof(gate, proof, replayKey, request);
  } catch (error) {
    logger?.warn({ err: error, method, path }, "payment proof could not be checked");
    return { kind: "respond", response: faultResponse(error) };
  }
  if (!claim.ok) return claim.answer;
  const paid: ProofPayment = {
    scheme: "exact",
    payer: proof.payer,
    amount: BigInt(proof.amount),
    payTo: proof.payTo,
    network: proof.network,
    token: proof.token,
    transaction: proof.tx,
    memo: proof.memo,
    proof,
  };
  return new GatePass(
    [[HeaderName.PaymentResponse, paymentResponseHeader(proof)]],
    paid,
    undefined,
    completeProof(gate, replayKey, claim.token, proof.exp * 1000, method, path),
  );
}

/** A proof's key claimed for its request (`token` with a guard that has claims), or the answer instead. */
type ProofClaim = { ok: true; token: string | undefined } | { ok: false; answer: SchemeAcceptance };

/**
 * Claims the key for this request, or consumes it with a guard that has no claims. The key is kept
 * until the proof itself expires: no proof for it can be accepted after that, and an x402 payload of
 * the same authorization is refused by the facilitator (docs/x402.md).
 */
async function claimProof(
  gate: ProofGate,
  proof: PaymentProof,
  replayKey: string,
  request: SchemeRequest,
): Promise<ProofClaim> {
  const { replayGuard, logger } = gate;
  const { method, path } = request;
  if (replayGuard.claim === undefined) {
    if (!(await replayGuard.consume(replayKey, proof.exp * 1000)))
      return { ok: false, answer: refusal(logger, method, path, "proof was already used") };
    return { ok: true, token: undefined };
  }
  // The claim is for this request: the memo already binds method, path and query, and the guard
  // holds the claim to them too, so no other request (nor an x402 payload of the same
  // authorization, whose claim is for its payload) can take a lapsed claim over.
  const claimed = await replayGuard.claim(replayKey, proof.exp * 1000, {
    request: `exact ${method} ${path}?${request.query}`,
    leaseMs: gate.leaseMs,
    maxClaims: MAX_PROOF_CLAIMS,
  });
  if (!claimed.ok && claimed.reason === "in-flight") {
    logger?.debug({ method, path }, "payment proof in flight");
    return {
      ok: false,
      answer: {
        kind: "respond",
        response: errorResponse(
          "PaymentInFlight",
          "this proof is held by the same request still being served (or whose gate failed before answering); send it again after Retry-After",
          503,
          Math.max(1, Math.ceil(claimed.retryAfterMs / 1000)),
        ),
      },
    };
  }
  if (!claimed.ok) return { ok: false, answer: refusal(logger, method, path, "proof was already used") };
  return { ok: true, token: claimed.token };
}

/**
 * `complete` of a proof payment: hands its key back when the handler failed (status ≥ 500), marks a
 * claimed key used when it answered. A failed settle leaves the claim to lapse: a retry of the same
 * request after the lease is then served once more, which costs the gate, never the payer. Only the
 * first report counts.
 */
function completeProof(
  gate: ProofGate,
  replayKey: string,
  claimToken: string | undefined,
  expiresAtMs: number,
  method: string,
  path: string,
): (status: number) => Promise<void> {
  const { replayGuard, logger } = gate;
  let reported = false;
  return async (status: number) => {
    if (reported) return;
    reported = true;
    if (!(status >= 500)) {
      if (claimToken === undefined) return;
      try {
        await replayGuard.settle?.(replayKey, expiresAtMs);
      } catch (error) {
        logger?.warn({ err: error, method, path, status }, "payment proof could not be marked used");
      }
      return;
    }
    try {
      await replayGuard.release(replayKey, claimToken);
      logger?.warn({ method, path, status }, "handler failed; payment proof released for a retry");
    } catch (error) {
      logger?.warn({ err: error, method, path, status }, "payment proof could not be released");
    }
  };
}

/**
 * The gate's `verifyPaymentProof(proof)`: `true` when the proof is unexpired, signed by this gate's
 * facilitator and pays this gate's offers (memo issued by this gate, terms equal to the memo's and
 * the gate's). Consumes nothing.
 */
export async function verifyGateProof(gate: ProofGate, value: unknown): Promise<boolean> {
  const proof = toPaymentProof(value);
  if (proof === undefined || proof.exp <= unixSeconds(gate.clock)) return false;
  const opened = openMemo(gate.memoSecret, proof.memo);
  if (!opened.ok) return false;
  const memo = opened.payload;
  const sameTerms =
    memo.a === proof.amount &&
    sameAddress(memo.t, proof.payTo) &&
    sameAddress(memo.t, gate.payTo) &&
    memo.n === proof.network &&
    memo.n === gate.network &&
    sameAddress(memo.k, proof.token) &&
    sameAddress(memo.k, gate.token);
  if (!sameTerms) return false;
  return (await gate.checkSignature(proof)).valid;
}

/** A proof refused, logged at debug level. */
function refusal(
  logger: GateSchemeContext["logger"],
  method: string,
  path: string,
  reason: string,
): SchemeAcceptance {
  logger?.debug({ method, path, reason }, "payment proof refused");
  return { kind: "refuse", error: "InvalidPaymentProof", message: `invalid payment proof: ${reason}` };
}

/**
 * `X-PAYMENT-RESPONSE` for an accepted proof: what `encodeJsonHeader` writes (standard base64 of the
 * UTF-8 JSON), with Node's native encoder, since every paid answer carries one. Never over the header
 * limit: the proof's fields are bounded by `PaymentProofSchema`.
 */
export function paymentResponseHeader(proof: Pick<PaymentProof, "tx" | "network" | "payer">): string {
  const json = JSON.stringify({
    success: true,
    transaction: proof.tx,
    network: proof.network,
    payer: proof.payer,
  });
  return Buffer.from(json, "utf8").toString("base64");
}
