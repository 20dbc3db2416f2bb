/**
 * The gate part of `exact` (docs/protocol.md, "Payment proof"): one-time pricing entries (`{ type: "one-time", amount |
 * price }`) become offers; a request carrying a facilitator's proof (`X-PAYMENT`) is served once.
 *
 * Invariants (moved unchanged from `paymentGate`):
 * - A payment is accepted at most once: after every check passes, its replay key (the EIP-3009
 *   authorization, `proofReplayKey`) is consumed atomically in the replay guard, and only the caller
 *   that consumed it passes. A check that could not be carried out answers 5xx and leaves the key
 *   unconsumed, so the payer can retry the same proof instead of paying again.
 * - A proof is used up only by a request that was served. With a replay guard that has claims (every
 *   built-in one), the key is claimed in flight for this request (method, path and query) for
 *   `proofLeaseSeconds`, and marked used when the adapter reports an answer below 500; an answer of
 *   500 or more releases it, and the same proof is accepted once more until it expires. A claim never
 *   reported (the gate died before answering) lapses with its lease: the same request with the same
 *   proof is then accepted again, at most `MAX_PROOF_CLAIMS` times in all; before that, it is answered
 *   `PaymentInFlight` (503, `Retry-After`). No other request, and no x402 payload of the same
 *   authorization, can take a claim over. A guard without claims consumes the key for good.
 * - A proof pays for the request it is shown on: its memo binds method, path and query, and its
 *   amount covers the cheapest one-time price of that request's route now.
 */

import { z } from "zod";
import { GatePass } from "../../gate/gatePass.ts";
import { errorResponse, faultResponse } from "../../gate/gateResponses.ts";
import { openMemo } from "../../gate/memo.ts";
import {
  atomicAmountOf,
  atomicPriceOf,
  OneTimePricingSchema,
  parseGateOptions,
} from "../../gate/paymentGateOptions.ts";
import { proofReplayKey } from "../../gate/paymentReplayKey.ts";
import type { FacilitatorClient } from "../../http/facilitatorClient.ts";
import { sameAddress } from "../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { type Jwks, JwksSchema } from "../../protocol/facilitator.ts";
import { HeaderName } from "../../protocol/header.ts";
import type { Network } from "../../protocol/network.ts";
import type { PaymentProof } from "../../protocol/paymentProof.ts";
import type {
  GateScheme,
  GateSchemeContext,
  GateSchemePart,
  SchemeAcceptance,
  SchemeOfferEntry,
  SchemePaymentBase,
} from "../types.ts";
import { checkSettleableAmounts } from "./checkSettleableAmounts.ts";
import {
  checkProofTerms,
  checkSignatureWithFacilitator,
  checkSignatureWithKeys,
  type ProofSignatureCheck,
  type SignatureVerdict,
  verifyProofSignature,
} from "./gate/checkPaymentProof.ts";
import { safeParsePaymentProof } from "./gate/parsePaymentProof.ts";
import {
  createJwksResolver,
  createStaticKeyResolver,
  type ProofKeyResolver,
} from "./gate/proofKeyResolver.ts";
import { toPaymentProof } from "./gate/verifyPaymentProof.ts";

/** One way to pay a route once: the price in the token's smallest unit. */
export type ExactOffer = { scheme: "exact"; amount: bigint };

/** A one-time payment proven by the facilitator's proof (`X-PAYMENT`). */
export type ProofPayment = SchemePaymentBase & {
  scheme: "exact";
  network: Network;
  /** Hash of the settling transaction. */
  transaction: `0x${string}`;
  memo: string;
  proof: PaymentProof;
};

declare module "../types.ts" {
  interface SchemePayments {
    exact: ProofPayment;
  }
}

/** The `exact` gate part with the gate's own `verifyPaymentProof(proof)` control. */
export type ExactGateScheme = GateScheme<ExactOffer> & {
  /** `true` when the proof is unexpired, signed by this gate's facilitator and pays this gate's offers. */
  verifyProof(value: unknown): Promise<boolean>;
};

/** The least a one-time payment for a route must be now: its cheapest one-time offer. */
export function cheapestOffer(offers: readonly { amount?: bigint | undefined }[]): bigint | undefined {
  let cheapest: bigint | undefined;
  for (const offer of offers) {
    if (offer.amount !== undefined && (cheapest === undefined || offer.amount < cheapest))
      cheapest = offer.amount;
  }
  return cheapest;
}

/** Compiles `{ type: "one-time", amount | price }` into an offer (shared with the x402 part). */
export function compileOneTime(entry: unknown, decimals: number, where: string): ExactOffer {
  const parsed = parseGateOptions(OneTimePricingSchema, entry, `paymentGate options: ${where}`);
  const amount =
    parsed.amount !== undefined
      ? atomicAmountOf(parsed.amount, `${where}.amount`)
      : atomicPriceOf(parsed.price as string, decimals, `${where}.price`);
  return { scheme: "exact", amount };
}

/**
 * The `accepts` entry of a one-time offer: its price, payable by x402 clients too (the entry goes into
 * `PAYMENT-REQUIRED`).
 */
export function oneTimeEntry(offer: ExactOffer): SchemeOfferEntry {
  return { scheme: "exact", amount: offer.amount, x402: true };
}

export const exactGate: GateSchemePart<ExactOffer, ExactOffer> = {
  pricingTypes: ["one-time"],
  create: createExactGate,
  entryOf: oneTimeEntry,
};

declare module "../types.ts" {
  interface SchemeGateOptions {
    /** Proof keys for local verification instead of fetching the JWKS: a JWKS or a resolver. */
    proofKeys?: ProofKeyResolver | Jwks | undefined;
  }
}

/** The gate option this part checks itself (the gate passes it through, `SchemeGateOptions`). */
const ProofKeysOptionSchema = z.object({
  proofKeys: z
    .custom<ProofKeyResolver | Jwks>(
      (value) =>
        (typeof value === "object" &&
          value !== null &&
          typeof (value as { resolve?: unknown }).resolve === "function") ||
        (typeof value === "object" && value !== null && "keys" in value),
      { error: "expected a JWKS or a ProofKeyResolver" },
    )
    .optional(),
});

function createExactGate(context: GateSchemeContext): ExactGateScheme {
  const { clock, replayGuard, logger, memoSecret, payTo, network, token } = context;
  const { proofKeys } = parseGateOptions(ProofKeysOptionSchema, context.options, "paymentGate options");
  const { checkSignature, keys } = signatureCheckOf(
    { proofVerification: (context.options as { proofVerification?: unknown }).proofVerification, proofKeys },
    context.facilitator,
    clock,
  );

  const leaseMs = ((context.options as { proofLeaseSeconds?: number }).proofLeaseSeconds ?? 60) * 1000;

  /**
   * `complete` of a proof payment: hands its key back when the handler failed (status ≥ 500), marks a
   * claimed key used when it answered. A failed settle leaves the claim to lapse: a retry of the same
   * request after the lease is then served once more, which costs the gate, never the payer.
   */
  const completeProof = (
    replayKey: string,
    claimToken: string | undefined,
    expiresAtMs: number,
    method: string,
    path: string,
  ) => {
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
  };

  return {
    compile: (entry, where) => compileOneTime(entry, context.decimals, where),
    offer: oneTimeEntry,
    async ready(offers) {
      // A price under the facilitator's minimum (0.01 USDC on Base) is refused at every payment; one
      // the network's fee puts under it for now is refused only until the fee falls.
      const raised = checkSettleableAmounts(
        await context.facilitator.supported(),
        { network, token, decimals: context.decimals },
        offers.map((offer) => offer.amount),
      );
      if (raised !== undefined) {
        logger?.warn(
          { network, minAmount: raised.minAmount.toString(), amounts: raised.belowNow.map(String) },
          "the network's fee has raised the facilitator's minimum payment above some one-time prices: payments at them are refused until the fee falls",
        );
      }
    },
    credential: (request) => request.headers.get(HeaderName.Payment),
    async accept(header, request, route): Promise<SchemeAcceptance> {
      const { method, path } = request;
      const parsed = safeParsePaymentProof(header);
      if (!parsed.ok) return refusal(logger, method, path, parsed.reason);
      const proof = parsed.proof;
      const minimumAmount = cheapestOffer(route.offers);
      if (minimumAmount === undefined)
        return refusal(logger, method, path, "this request is not sold for a one-time payment");
      // Computed once per request (one keccak256 of the memo, through `memoNonce`: fastKeccak.ts).
      const replayKey = proofReplayKey(proof);
      let claimToken: string | undefined;
      try {
        const terms = checkProofTerms(proof, {
          memoSecret,
          clock,
          expected: {
            method,
            path,
            query: request.query,
            // A proof pays for this request only if it covers this request's price (a route priced by
            // a function may price another query of the same path higher).
            minimumAmount,
            payTo,
            network,
            token,
          },
        });
        if (!terms.valid) return refusal(logger, method, path, terms.reason);
        // The key at hand is used without a promise; otherwise (a JWKS not yet read, a key rotated in,
        // remote verification) the check may fetch.
        const key = keys?.known?.(proof.kid);
        const signature: SignatureVerdict =
          key !== undefined ? verifyProofSignature(proof, key) : await checkSignature(proof);
        if (!signature.valid) return refusal(logger, method, path, signature.reason);
        // Keep the key until the proof itself expires: no proof for it can be accepted after that, and
        // an x402 payload of the same authorization is refused by the facilitator (docs/x402.md).
        if (replayGuard.claim === undefined) {
          if (!(await replayGuard.consume(replayKey, proof.exp * 1000)))
            return refusal(logger, method, path, "proof was already used");
        } else {
          // The claim is for this request: the memo already binds method, path and query, and the
          // guard holds the claim to them too, so no other request (nor an x402 payload of the same
          // authorization, whose claim is for its payload) can take a lapsed claim over.
          const claimed = await replayGuard.claim(replayKey, proof.exp * 1000, {
            request: `exact ${method} ${path}?${request.query}`,
            leaseMs,
            maxClaims: MAX_PROOF_CLAIMS,
          });
          if (!claimed.ok && claimed.reason === "in-flight") {
            logger?.debug({ method, path }, "payment proof in flight");
            return {
              kind: "respond",
              response: errorResponse(
                "PaymentInFlight",
                "this proof is held by the same request still being served (or whose gate failed before answering); send it again after Retry-After",
                503,
                Math.max(1, Math.ceil(claimed.retryAfterMs / 1000)),
              ),
            };
          }
          if (!claimed.ok) return refusal(logger, method, path, "proof was already used");
          claimToken = claimed.token;
        }
      } catch (error) {
        logger?.warn({ err: error, method, path }, "payment proof could not be checked");
        return { kind: "respond", response: faultResponse(error) };
      }
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
        completeProof(replayKey, claimToken, proof.exp * 1000, method, path),
      );
    },
    async verifyProof(value) {
      const proof = toPaymentProof(value);
      if (proof === undefined || proof.exp <= unixSeconds(clock)) return false;
      const opened = openMemo(memoSecret, proof.memo);
      if (!opened.ok) return false;
      const memo = opened.payload;
      const sameTerms =
        memo.a === proof.amount &&
        sameAddress(memo.t, proof.payTo) &&
        sameAddress(memo.t, payTo) &&
        memo.n === proof.network &&
        memo.n === network &&
        sameAddress(memo.k, proof.token) &&
        sameAddress(memo.k, token);
      if (!sameTerms) return false;
      return (await checkSignature(proof)).valid;
    },
  };
}

/**
 * Claims a proof's key may have while it lives: the first and two retries after a gate died before
 * answering. Bounds what a host that never reports `complete` gives away per payment.
 */
export const MAX_PROOF_CLAIMS = 3;

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

/** The gate's signature check, and the key resolver behind it when proofs are verified locally. */
function signatureCheckOf(
  config: { proofVerification?: unknown; proofKeys?: unknown },
  facilitator: FacilitatorClient,
  clock: Clock,
): { checkSignature: ProofSignatureCheck; keys?: ProofKeyResolver } {
  if (config.proofVerification === "remote") {
    if (config.proofKeys !== undefined) {
      throw new TollgateError(
        "InvalidRequest",
        "paymentGate options: proofKeys is for local proof verification only",
      );
    }
    return { checkSignature: checkSignatureWithFacilitator(facilitator) };
  }
  const keys = config.proofKeys as ProofKeyResolver | { keys: unknown } | undefined;
  let resolver: ProofKeyResolver;
  if (keys === undefined) {
    resolver = createJwksResolver({ loadJwks: () => facilitator.jwks(), clock });
  } else if ("resolve" in keys) {
    resolver = keys;
  } else {
    resolver = createStaticKeyResolver(parseGateOptions(JwksSchema, keys, "paymentGate options: proofKeys"));
  }
  return { checkSignature: checkSignatureWithKeys(resolver), keys: resolver };
}
