/**
 * The gate part of x402 v2 `exact` interop (DESIGN.md §2.7): a standard x402 client pays a route's
 * one-time offers with `PAYMENT-SIGNATURE`; the payment is settled through the facilitator **before**
 * the handler runs and served once (`createX402Settlement` holds the replay rules). A failed handler
 * does not hand the payment back: the x402 client signs a fresh one.
 */
import { faultResponse } from "../../gate/gateResponses.ts";
import {
  createX402Settlement,
  settleThroughFacilitator,
  withX402Reason,
  type X402GatePayment,
  x402GateId,
} from "../../gate/x402Settlement.ts";
import { HeaderName } from "../../protocol/header.ts";
import type { ExactOffer } from "../exact/gate.ts";
import type { GateSchemePart, SchemeAcceptance } from "../types.ts";

declare module "../types.ts" {
  interface SchemePayments {
    x402Exact: X402GatePayment;
  }
}

export const x402ExactGate: GateSchemePart<ExactOffer> = {
  // It prices nothing of its own: it is another way to pay the `exact` offers.
  pricingTypes: [],
  accepts: ["exact"],
  create(context) {
    const { logger } = context;
    const acceptX402 = createX402Settlement({
      settle: settleThroughFacilitator(context.facilitator),
      replayGuard: context.replayGuard,
      gateId: x402GateId(context.memoSecret),
      clock: context.clock,
      payTo: context.payTo,
      network: context.network,
      token: context.token,
      maxTimeoutSeconds: context.memoTtlSeconds,
    });
    return {
      credential: (request) => request.headers.get(HeaderName.X402PaymentSignature),
      async accept(header, request, route): Promise<SchemeAcceptance> {
        const outcome = await acceptX402(header, {
          offers: route.offers,
          tokenEip712: await context.tokenEip712(),
        });
        if (outcome.kind === "paid") return { kind: "pass", paid: outcome.payment, headers: outcome.headers };
        const { method, path } = request;
        if (outcome.kind === "fault") {
          logger?.warn({ err: outcome.error, method, path }, "x402 payment could not be settled");
          return { kind: "respond", response: faultResponse(outcome.error) };
        }
        logger?.debug({ method, path, reason: outcome.reason }, "x402 payment refused");
        return {
          kind: "refuse",
          error: "InvalidPaymentProof",
          message: `x402 payment refused: ${outcome.message}`,
          decorate: (response) => {
            withX402Reason(response, outcome.reason);
          },
        };
      },
    };
  },
};
