/**
 * The gate part of x402 v2 `exact` interop (docs/x402.md): a standard x402 client pays a route's
 * one-time offers with `PAYMENT-SIGNATURE` (or `_meta["x402/payment"]` over MCP). As x402's reference
 * servers do, the payment is verified before the handler runs and settled in `complete` only when the
 * handler answered below 400 (`settleAfterHandler`: the adapters hold the response until then);
 * `createX402Settlement` holds the replay rules.
 *
 * Why below 400: 2xx and 3xx are the answer that was bought (a redirect to the resource included); a
 * 4xx or 5xx delivered nothing, so, as x402's middleware does, nothing is settled and the payer may
 * send the same payment again. A settlement that fails after the handler ran replaces its answer: a
 * fresh 402 with the x402 reason, or a 5xx to retry the same header; nothing was charged either way.
 */
import { errorResponse, faultResponse } from "../../gate/gateResponses.ts";
import { encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import type { ExactOffer } from "../exact/gate.ts";
import type { GateSchemePart, SchemeAcceptance, SchemeCompletion } from "../types.ts";
import {
  createX402Settlement,
  settleThroughFacilitator,
  verifyThroughFacilitator,
  withX402Reason,
  type X402GatePayment,
  x402GateId,
} from "./gate/x402Settlement.ts";

declare module "../types.ts" {
  interface SchemePayments {
    x402Exact: X402GatePayment;
  }
}

export const x402ExactGate: GateSchemePart<ExactOffer> = {
  // It prices nothing of its own: it is another way to pay the `exact` offers.
  pricingTypes: [],
  accepts: ["exact"],
  // Over MCP the payload comes in `_meta["x402/payment"]` as an object: the header carries its JSON.
  mcp: {
    credentials: {
      [McpMetaKey.X402Payment]: (payload) => ({
        [HeaderName.X402PaymentSignature]: encodeJsonHeader(payload),
      }),
    },
  },
  create(context) {
    const { logger } = context;
    const acceptX402 = createX402Settlement({
      verify: verifyThroughFacilitator(context.facilitator),
      settle: settleThroughFacilitator(context.facilitator),
      replayGuard: context.replayGuard,
      gateId: x402GateId(context.memoSecret),
      clock: context.clock,
      payTo: context.payTo,
      network: context.network,
      token: context.token,
      maxTimeoutSeconds: context.memoTtlSeconds,
      leaseMs: ((context.options as { proofLeaseSeconds?: number }).proofLeaseSeconds ?? 60) * 1000,
    });
    return {
      credential: (request) => request.headers.get(HeaderName.X402PaymentSignature),
      async accept(header, request, route): Promise<SchemeAcceptance> {
        const outcome = await acceptX402(header, {
          offers: route.offers,
          tokenEip712: await context.tokenEip712(),
        });
        const { method, path } = request;
        if (outcome.kind === "paid") {
          // Settled already (a retry whose settlement landed after its 5xx): served like a proof, whose
          // key comes back when the handler fails so that the same header is served on a retry.
          let reported = false;
          const complete = async (status: number): Promise<void> => {
            if (reported) return;
            reported = true;
            await outcome.done(status < 500).catch((error: unknown) => {
              logger?.warn({ err: error, method, path }, "a settled x402 payment could not be handed back");
            });
          };
          return { kind: "pass", paid: outcome.payment, headers: outcome.headers, complete };
        }
        if (outcome.kind === "verified") {
          const headers = new Headers();
          let completion: Promise<SchemeCompletion | undefined> | undefined;
          const complete = (status: number): Promise<SchemeCompletion | undefined> => {
            // Only the first report counts (an adapter may report twice: a throw, then `close`).
            completion ??= outcome.finish(status < 400).then((finished): SchemeCompletion | undefined => {
              if (finished.kind === "settled" || finished.kind === "unsettled") {
                for (const [name, value] of finished.headers) headers.set(name, value);
                return undefined;
              }
              if (finished.kind === "fault") {
                logger?.warn({ err: finished.error, method, path }, "x402 payment could not be settled");
                return { kind: "respond", response: faultResponse(finished.error) };
              }
              logger?.debug({ method, path, reason: finished.reason }, "x402 settlement refused");
              return refusalOf(finished.reason, `x402 settlement refused: ${finished.message}`);
            });
            return completion;
          };
          return { kind: "pass", paid: outcome.payment, headers, complete, settleAfterHandler: true };
        }
        if (outcome.kind === "in-flight") {
          logger?.debug({ method, path }, "x402 payment in flight");
          return {
            kind: "respond",
            response: errorResponse(
              "PaymentInFlight",
              "this payment is held by the same request still being served (or whose gate failed before settling); send it again after Retry-After",
              503,
              Math.max(1, Math.ceil(outcome.retryAfterMs / 1000)),
            ),
          };
        }
        if (outcome.kind === "fault") {
          logger?.warn({ err: outcome.error, method, path }, "x402 payment could not be verified");
          return { kind: "respond", response: faultResponse(outcome.error) };
        }
        logger?.debug({ method, path, reason: outcome.reason }, "x402 payment refused");
        return refusalOf(outcome.reason, `x402 payment refused: ${outcome.message}`);
      },
    };
  },
};

/** A refusal the dispatcher answers with a fresh 402 carrying the x402 `reason`. */
function refusalOf(reason: string, message: string): SchemeAcceptance & { kind: "refuse" } {
  return {
    kind: "refuse",
    error: "InvalidPaymentProof",
    message,
    decorate: (response) => {
      withX402Reason(response, reason);
    },
  };
}
