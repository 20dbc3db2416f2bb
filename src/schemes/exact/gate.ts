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
import {
  atomicAmountOf,
  atomicPriceOf,
  OneTimePricingSchema,
  parseGateOptions,
} from "../../gate/paymentGateOptions.ts";
import type { FacilitatorClient } from "../../http/facilitatorClient.ts";
import type { Clock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { type Jwks, JwksSchema } from "../../protocol/facilitator.ts";
import { HeaderName } from "../../protocol/header.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import type { GateScheme, GateSchemeContext, GateSchemePart, SchemeOfferEntry } from "../types.ts";
import { checkSettleableAmounts } from "./checkSettleableAmounts.ts";
import {
  checkSignatureWithFacilitator,
  checkSignatureWithKeys,
  type ProofSignatureCheck,
} from "./gate/checkPaymentProof.ts";
import { acceptProof, type ProofGate, type ProofPayment, verifyGateProof } from "./gate/proofAcceptance.ts";
import {
  createJwksResolver,
  createStaticKeyResolver,
  type ProofKeyResolver,
} from "./gate/proofKeyResolver.ts";

/** One way to pay a route once: the price in the token's smallest unit. */
export type ExactOffer = { scheme: "exact"; amount: bigint };

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
  // Over MCP a proof comes in `_meta["tollgate/payment"]`, exactly the `X-PAYMENT` value.
  mcp: { credentials: { [McpMetaKey.TollgatePayment]: HeaderName.Payment } },
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
  const { clock, logger, network, token } = context;
  const { proofKeys } = parseGateOptions(ProofKeysOptionSchema, context.options, "paymentGate options");
  const { checkSignature, keys } = signatureCheckOf(
    { proofVerification: (context.options as { proofVerification?: unknown }).proofVerification, proofKeys },
    context.facilitator,
    clock,
  );
  const gate: ProofGate = {
    clock,
    replayGuard: context.replayGuard,
    logger,
    memoSecret: context.memoSecret,
    payTo: context.payTo,
    network,
    token,
    checkSignature,
    keys,
    leaseMs: ((context.options as { proofLeaseSeconds?: number }).proofLeaseSeconds ?? 60) * 1000,
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
    accept: (header, request, route) => acceptProof(gate, header, request, route),
    verifyProof: (value) => verifyGateProof(gate, value),
  };
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
