/**
 * `paymentGate` (docs/gate.md): the framework-free core of a resource server that charges per request.
 * A function of a web request returning a tagged result; the Hono, Express and `node:http` adapters
 * translate it.
 *
 * Invariants:
 * - A refused request never reaches the handler: every outcome other than `pass` is a `respond`.
 * - A payment is accepted at most once: after every check passes, its replay key is consumed atomically
 *   in the replay guard, and only the caller that consumed it passes. The key is the EIP-3009
 *   authorization (`paymentReplayKey`), the same for a proof (`X-PAYMENT`) and an x402 payload
 *   (`PAYMENT-SIGNATURE`) carrying one transfer, so a transfer buys one response under either scheme.
 *   A check that could not be carried out (facilitator or replay guard down) answers 5xx and leaves
 *   the key unconsumed, so the payer can retry the same proof instead of paying again.
 * - A proof is used up only by a request that was served: it is claimed in flight for its request
 *   with a lease (`proofLeaseSeconds`), marked used when the adapter reports (`complete`) a 2xx, 3xx
 *   or 4xx, and released when it reports 5xx or a throw, so the same proof is accepted once more until
 *   it expires. A claim never reported (the gate died) lapses with its lease, and the same request may
 *   then take it over (src/schemes/exact/gate.ts).
 * - An x402 payment (`PAYMENT-SIGNATURE`) is only verified before the handler and settled by
 *   `complete` when the handler answered below 400 (`settleAfterHandler`); a failed handler is not
 *   charged for, and a settlement that fails after it replaces its answer (x402's reference order).
 * - Every 402 is built fresh, with new memos; the gate stores nothing per 402.
 * - Bad input is a 402 (or a 4xx), never a 500.
 * - The gate reads a request's path and query from its target (`normalizeRequestTarget`), never its
 *   `Host`: the route priced, the memo's path and the 402's `resource.url` (on `publicOrigin`) come
 *   from the target alone.
 * - A proof pays for the request it is shown on: its memo binds method, path and query, and its amount
 *   covers the cheapest one-time price of that request's route now.
 */
import { z } from "zod";
import { GateErrorCodeSchema, TollgateError } from "../protocol/errors.ts";
import type { PaymentRequired } from "../protocol/paymentRequired.ts";
import { createSchemeRegistry } from "../schemes/registry.ts";
import type {
  GateScheme,
  SchemeAcceptance,
  SchemeOffer,
  SchemePayment,
  SchemeRequest,
  ServedSubscription,
} from "../schemes/types.ts";
import { GatePass } from "./gatePass.ts";
import type { GateRequest } from "./gateRequest.ts";
import { errorResponse, faultResponse } from "./gateResponses.ts";
import { type Acceptor, buildParts, type CompiledRoute, type GateParts, GateRoutes } from "./gateRoutes.ts";
import { gateSchemes } from "./gateSchemes.ts";
import { type GateSetup, gateSetupOf, schemeContextOf } from "./gateSetup.ts";
import { normalizeRequestTarget } from "./normalizeRequestTarget.ts";
import {
  type GatePricingEntry,
  GatePricingEntrySchema,
  type PaymentGateOptions,
  PaymentGateOptionsSchema,
  parseGateOptions,
  SubscriptionPricingSchema,
} from "./paymentGateOptions.ts";
import { RouteRequestView, SchemeRequestView } from "./requestView.ts";
import { RoutePaymentRequired } from "./routePaymentRequired.ts";

/**
 * The payment the gate accepted for this request, over every registered scheme: a one-time proof
 * (`ProofPayment`), an x402 payload (`X402GatePayment`), and what other schemes add (`SchemePayments`).
 */
export type GatePayment = SchemePayment;

/**
 * `pass`: run the handler, then add `headers` to its response (`X-PAYMENT-RESPONSE` after a payment),
 * and report the handler's status with `complete` (500 when it threw) before the response is sent.
 * `paid` is the one-time payment, `subscription` the subscription served under (with its metered
 * units and charge); both are absent for a request no pricing applies to.
 * With `settleAfterHandler` (an x402 payment: verified, not yet settled) the payment is settled by
 * `complete`: hold the handler's whole response until it resolved, read `headers` after it (it adds
 * `PAYMENT-RESPONSE`), and send the response it answers instead of the handler's when it answers one
 * (the settlement failed: a 402 or a 5xx; nothing was charged). A host that never calls `complete`
 * is never paid for such a request.
 * `respond`: answer with `response` and do not run the handler.
 */
export type GateResult =
  | {
      kind: "pass";
      paid?: GatePayment | undefined;
      subscription?: ServedSubscription | undefined;
      headers: Headers;
      complete: CompleteRequest;
      settleAfterHandler?: true | undefined;
    }
  | { kind: "respond"; response: Response };

/**
 * Reports how the handler answered a request the gate let through. For a proof payment (`X-PAYMENT`),
 * a status of 500 or more releases its key in the replay guard, so the payer can present the same
 * proof again until it expires instead of paying twice; any other status marks it used. For an
 * x402 payment (`settleAfterHandler`), a status below 400 settles it and 400 or more settles nothing
 * and gives its key back; it resolves with a response to send instead of the handler's when the
 * settlement failed. Only the first call counts; it never rejects (a failed release is logged and
 * the proof stays used), and it does nothing for other requests. Not calling it at all leaves a
 * proof in flight, to be accepted again for the same request after its lease (with a guard that has
 * claims; consumed for good otherwise), and an x402 payment unsettled.
 */
export type CompleteRequest = (status: number) => Promise<Response | undefined> | Promise<void>;

/** `complete` of a request whose payment (if any) cannot be handed back: nothing to do. */
const completeNothing = async (): Promise<void> => undefined;

export type PaymentGate = (request: GateRequest) => Promise<GateResult>;

/** What a gate that sells subscriptions runs besides requests; harmless on a gate that does not. */
export type PaymentGateControls = {
  /**
   * Reads every plan of the gate's static pricing from the facilitator and checks it is the gate's own;
   * throws `InvalidRequest` naming the plan otherwise. Optional: plans are read on first use anyway.
   */
  ready(): Promise<void>;
  /** Applies every facilitator event recorded so far: subscription changes, deprecations, settled usage. */
  syncEvents(): Promise<void>;
  /** Sends pending metered charges to the facilitator now; resolves with the records sent. */
  flushUsage(): Promise<number>;
  /** Stops polling the event feed and flushing on a timer, after a last flush. */
  close(): Promise<void>;
  /**
   * The specification's `buildPaymentRequired({ plan: planId })`: a complete 402 body (fresh memos)
   * for that plan — its terms read from the facilitator's `GET /plans/:id` — and any `pricing` given,
   * or, with neither, for the route `method` + `path` (default `GET /`) as this gate prices it.
   * Throws `InvalidRequest` for a plan that is not this gate's, `ChainUnavailable` when the
   * facilitator cannot be read. Answer it with `Response.json(body, { status: 402 })`.
   */
  buildPaymentRequired(request?: PaymentRequiredRequest): Promise<PaymentRequired>;
  /**
   * The specification's `verifyPaymentProof(proof)` for this gate: `true` when the proof (object or
   * `X-PAYMENT` text) is unexpired, signed by this gate's facilitator (its `proofVerification`), and
   * pays one of this gate's own offers (memo issued by this gate, terms equal to the memo's and the
   * gate's). It consumes nothing and checks no route: use the gate itself to serve a request.
   * Throws `ChainUnavailable` when the facilitator's keys cannot be read.
   */
  verifyPaymentProof(proof: unknown): Promise<boolean>;
};

/** What `buildPaymentRequired` builds a 402 for (all optional; see `PaymentGateControls`). */
export const PaymentRequiredRequestSchema = z.strictObject({
  /** A plan id (decimal text, bigint or `{ planId }`): a subscription option first in `accepts`. */
  plan: SubscriptionPricingSchema.shape.plan.optional(),
  /** More options, as in the gate's `pricing`. */
  pricing: z.array(GatePricingEntrySchema).max(32).optional(),
  /** What the memos bind (default `GET` and `/`); the route priced when neither plan nor pricing is given. */
  method: z
    .string()
    .regex(/^[A-Za-z]{1,16}$/)
    .optional(),
  path: z.string().max(1024).optional(),
  error: GateErrorCodeSchema.optional(),
  message: z.string().max(1024).optional(),
  description: z.string().max(1024).optional(),
});
export type PaymentRequiredRequest = z.input<typeof PaymentRequiredRequestSchema>;

/** Longest request path a memo can bind (`MemoPayloadSchema.p`). */
const MAX_PATH_LENGTH = 1024;

/**
 * Creates a gate. Options are checked here, once; a misconfiguration throws `InvalidRequest` naming
 * the option. Every scheme's gate part is built here and every static route compiled, so a request
 * looks nothing up in the scheme registry.
 *
 * @example
 * const gate = paymentGate({
 *   payTo: "0x…", network: "eip155:8453", token: usdc, facilitator: "https://facilitator.example.com",
 *   memoSecret: env.TOLLGATE_MEMO_SECRET,
 *   routes: { "GET /reports/:id": { price: "0.50" }, "POST /summarize": { amount: 20_000n } },
 * });
 * app.use("/api/*", honoPaymentGate(gate));
 */
export function paymentGate(options: PaymentGateOptions): PaymentGate & PaymentGateControls {
  const config = parseGateOptions(PaymentGateOptionsSchema, options, "paymentGate options");
  const setup = gateSetupOf(config);
  const registry = createSchemeRegistry(gateSchemes, config.schemes ?? []);
  const parts = buildParts(registry.schemes, schemeContextOf(setup));
  const routes = new GateRoutes(parts, config);
  const answers = new RoutePaymentRequired(setup);
  return Object.assign(dispatcherOf(setup, routes, answers), controlsOf(setup, parts, routes, answers));
}

/** The gate itself: the request's route, then the first part whose credential it carries, or a 402. */
function dispatcherOf(setup: GateSetup, routes: GateRoutes, answers: RoutePaymentRequired): PaymentGate {
  const { routeOrigin, trustedProxies, logger } = setup;
  const resolveRoute = routes.resolve;
  return async function paymentGate(request: GateRequest): Promise<GateResult> {
    const reading = normalizeRequestTarget(request.url);
    if (!reading.ok) {
      return { kind: "respond", response: errorResponse("InvalidRequest", reading.reason, 400) };
    }
    const method = request.method.toUpperCase();
    // The memo binds the normalized path and the query; routes are matched on the path decoded once,
    // as routers see it.
    const path = reading.path;
    const target = new SchemeRequestView(method, path, reading, request, routeOrigin, trustedProxies);
    const route = resolveRoute(new RouteRequestView(target));
    if (route === undefined) return new GatePass(undefined, undefined, undefined, completeNothing);
    if (path.length > MAX_PATH_LENGTH) {
      return {
        kind: "respond",
        response: errorResponse(
          "InvalidRequest",
          `paid paths are at most ${MAX_PATH_LENGTH} characters`,
          414,
        ),
      };
    }
    // The first part (in precedence order) whose credential the request carries owns it.
    const acceptors = route.acceptors;
    for (let i = 0; i < acceptors.length; i++) {
      const acceptor = acceptors[i] as Acceptor;
      const credential = acceptor.part.credential(target, acceptor.route);
      if (credential === null) continue;
      let outcome: SchemeAcceptance;
      try {
        const accepted = acceptor.part.accept(credential, target, acceptor.route);
        // A part's own promise type (another realm's, a thenable) is awaited too.
        outcome =
          typeof (accepted as { then?: unknown }).then === "function"
            ? await accepted
            : (accepted as SchemeAcceptance);
      } catch (fault) {
        logger?.warn({ err: fault, method, path }, "a payment could not be checked");
        return { kind: "respond", response: faultResponse(fault) };
      }
      if (outcome.kind === "pass") return passOf(outcome, target, route, answers);
      if (outcome.kind === "respond") return outcome;
      const refusal = await answers.respond(outcome.error, outcome.message, target, route);
      outcome.decorate?.(refusal.response);
      return refusal;
    }
    return answers.respond("PaymentRequired", "payment required", target, route);
  };
}

/**
 * A part's `pass` as the gate's. With `settleAfterHandler`, a settlement that failed after the
 * handler ran is answered instead of the handler's answer: its refusal as a fresh 402 of the route.
 */
function passOf(
  outcome: Extract<SchemeAcceptance, { kind: "pass" }>,
  target: SchemeRequest,
  route: CompiledRoute,
  answers: RoutePaymentRequired,
): GateResult {
  const complete = outcome.complete;
  if (outcome.settleAfterHandler === true && complete !== undefined) {
    const pass = outcome as GateResult & { kind: "pass" };
    pass.complete = async (status) => {
      const answer = await complete(status);
      if (answer === undefined) return undefined;
      if (answer.kind === "respond") return answer.response;
      const refusal = await answers.respond(answer.error, answer.message, target, route);
      answer.decorate?.(refusal.response);
      return refusal.response;
    };
    return pass;
  }
  outcome.complete ??= completeNothing;
  return outcome as GateResult;
}

/** The gate's controls: its parts' lifecycle, and the specification's two operations on its terms. */
function controlsOf(
  setup: GateSetup,
  parts: GateParts,
  routes: GateRoutes,
  answers: RoutePaymentRequired,
): PaymentGateControls {
  const allParts = [...parts.byId.values()];
  const proofParts = allParts.filter((part) => part.verifyProof !== undefined);
  return {
    buildPaymentRequired: buildPaymentRequiredOf(setup, routes, answers),
    /** The specification's `verifyPaymentProof(proof)`: asks each part that has proofs, in order. */
    async verifyPaymentProof(proof) {
      for (const part of proofParts) if (await part.verifyProof?.(proof)) return true;
      return false;
    },
    async ready() {
      // Every static route's offers, by the part that accepts them, read once each.
      const byPart = new Map<GateScheme, SchemeOffer[]>();
      for (const route of routes.staticRoutes) {
        for (const { part, route: offered } of route.acceptors) {
          if (part.ready === undefined) continue;
          const list = byPart.get(part) ?? [];
          for (const offer of offered.offers) if (!list.includes(offer)) list.push(offer);
          byPart.set(part, list);
        }
      }
      await Promise.all([...byPart].map(([part, offers]) => part.ready?.(offers)));
    },
    syncEvents: async () => {
      await Promise.all(allParts.map((part) => part.syncEvents?.()));
    },
    flushUsage: async () => {
      let sent = 0;
      for (const part of allParts) sent += (await part.flushUsage?.()) ?? 0;
      return sent;
    },
    close: async () => {
      await Promise.all(allParts.map((part) => part.close?.()));
    },
  };
}

/** The specification's `buildPaymentRequired({ plan })`, on this gate's configuration. */
function buildPaymentRequiredOf(
  setup: GateSetup,
  routes: GateRoutes,
  answers: RoutePaymentRequired,
): PaymentGateControls["buildPaymentRequired"] {
  const { config } = setup;
  return async (request: PaymentRequiredRequest = {}): Promise<PaymentRequired> => {
    const input = parseGateOptions(PaymentRequiredRequestSchema, request ?? {}, "buildPaymentRequired");
    const method = (input.method ?? "GET").toUpperCase();
    const reading = normalizeRequestTarget(input.path ?? "/");
    if (!reading.ok)
      throw new TollgateError("InvalidRequest", `buildPaymentRequired: path: ${reading.reason}`);
    const url = new URL(reading.target, setup.routeOrigin);
    const pricing: GatePricingEntry[] = [
      ...(input.plan === undefined ? [] : [{ type: "subscription" as const, plan: input.plan }]),
      ...(input.pricing ?? []),
    ];
    const route =
      pricing.length > 0
        ? routes.priced(pricing, "buildPaymentRequired", input.description ?? config.description)
        : routes.resolve({ method, path: reading.routePath, url });
    if (route === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        `buildPaymentRequired: nothing to sell: give { plan } or { pricing }, or the path of a priced route (${method} ${reading.path} is free)`,
      );
    }
    const target: SchemeRequest = {
      method,
      path: reading.path,
      query: reading.query,
      routePath: reading.routePath,
      target: reading.target,
      url,
      headers: new Headers(),
      units: undefined,
    };
    const entries = await answers.entries(route, target);
    const built = await answers.compose(
      input.error ?? "PaymentRequired",
      input.message ?? "payment required",
      target,
      route,
      entries,
    );
    return built.body;
  };
}
