/**
 * `paymentGate` (DESIGN.md §5): the framework-free core of a resource server that charges per request.
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
 * - A proof is used up only by a request that was served: when the adapter reports (`complete`) that
 *   the handler answered 5xx or threw, the key is released and the same proof is accepted once more
 *   until it expires. A 2xx, 3xx or 4xx keeps it consumed, as does an adapter that never reports.
 * - Every 402 is built fresh, with new memos; the gate stores nothing per 402.
 * - Bad input is a 402 (or a 4xx), never a 500.
 * - The gate reads a request's path and query from its target (`normalizeRequestTarget`), never its
 *   `Host`: the route priced, the memo's path and the 402's `resource.url` (on `publicOrigin`) come
 *   from the target alone.
 * - A proof pays for the request it is shown on: its memo binds method, path and query, and its amount
 *   covers the cheapest one-time price of that request's route now.
 */
import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { z } from "zod";
import { createFacilitatorClient, type FacilitatorClient } from "../client/facilitatorClient.ts";
import { sameAddress } from "../protocol/address.ts";
import { parseUnitsExact, USDC_DECIMALS } from "../protocol/amount.ts";
import { type Clock, systemClock, unixSeconds } from "../protocol/clock.ts";
import {
  type ErrorCode,
  type GateErrorCode,
  GateErrorCodeSchema,
  httpStatusOf,
  TollgateError,
} from "../protocol/errors.ts";
import { JwksSchema } from "../protocol/facilitator.ts";
import { encodeJsonHeader, HeaderName } from "../protocol/header.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { PaymentRequired } from "../protocol/paymentRequired.ts";
import { createMemoryReplayGuard } from "../store/createMemoryReplayGuard.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import {
  checkPaymentProof,
  checkSignatureWithFacilitator,
  checkSignatureWithKeys,
  type ProofSignatureCheck,
} from "./checkPaymentProof.ts";
import {
  composePaymentRequired,
  type Offer,
  type OneTimeOffer,
  paymentRequiredResponse,
} from "./composePaymentRequired.ts";
import { deductionAmount, type ServedSubscription } from "./deductAllowance.ts";
import { memoSecretOf, openMemo } from "./memo.ts";
import { createMemoryUsageLedger } from "./metering/createMemoryUsageLedger.ts";
import { createUsageFlusher } from "./metering/createUsageFlusher.ts";
import { type NormalizedTarget, normalizeRequestTarget } from "./normalizeRequestTarget.ts";
import { safeParsePaymentProof } from "./parsePaymentProof.ts";
import {
  type Amount,
  amountProblem,
  type GateLogger,
  type PaymentGateOptions,
  PaymentGateOptionsSchema,
  type Price,
  type PricingEntry,
  PricingEntrySchema,
  parseGateOptions,
  type RouteConfig,
  RouteConfigSchema,
  type RouteRequest,
  SubscriptionPricingSchema,
} from "./paymentGateOptions.ts";
import { proofReplayKey } from "./paymentReplayKey.ts";
import { createJwksResolver, createStaticKeyResolver, type ProofKeyResolver } from "./proofKeyResolver.ts";
import { compileRoutePattern } from "./routePattern.ts";
import { createPlanCatalog, type PlanCatalog } from "./subscriptions/createPlanCatalog.ts";
import {
  createSubscriptionGate,
  type GateSubscription,
  type SubscriptionGate,
} from "./subscriptions/createSubscriptionGate.ts";
import { toPaymentProof } from "./verifyPaymentProof.ts";
import {
  createX402Settlement,
  settleThroughFacilitator,
  withX402Reason,
  type X402GatePayment,
  x402GateId,
} from "./x402Settlement.ts";

/** What the gate reads of a request: a web `Request` satisfies it, and adapters build it cheaply. */
export type GateRequest = {
  method: string;
  /**
   * The request target: origin-form (`/api/x?q`, what the adapters pass) or an absolute URL, whose
   * scheme and authority are ignored. Only its path and query are read (`normalizeRequestTarget`).
   */
  url: string;
  headers: { get(name: string): string | null };
  /**
   * Metered units of this request, when the host decides them from what the gate does not read (a
   * request body, as the specialist host does with `capability.units(input)`). Overrides the route's
   * `units`; a whole number ≥ 0. Only the server sets it, never a header the client sends.
   */
  units?: number | undefined;
};

/** A settled one-time payment the gate accepted for this request. */
export type GatePayment = ProofPayment | X402GatePayment;

/** A one-time payment proven by the facilitator's proof (`X-PAYMENT`). */
export type ProofPayment = {
  scheme: "exact";
  payer: Address;
  amount: bigint;
  payTo: Address;
  network: Network;
  token: Address;
  /** Hash of the settling transaction. */
  transaction: Hex;
  memo: string;
  proof: PaymentProof;
};

/**
 * `pass`: run the handler, then add `headers` to its response (`X-PAYMENT-RESPONSE` after a payment),
 * and report the handler's status with `complete` (500 when it threw) before the response is sent.
 * `paid` is the one-time payment, `subscription` the subscription served under (with its metered
 * units and charge); both are absent for a request no pricing applies to.
 * `respond`: answer with `response` and do not run the handler.
 */
export type GateResult =
  | {
      kind: "pass";
      paid?: GatePayment;
      subscription?: ServedSubscription;
      headers: Headers;
      complete: CompleteRequest;
    }
  | { kind: "respond"; response: Response };

/**
 * Reports how the handler answered a request the gate let through. For a proof payment (`X-PAYMENT`),
 * a status of 500 or more releases its key in the replay guard, so the payer can present the same
 * proof again until it expires instead of paying twice; any other status keeps it consumed. Only the
 * first call counts; it never rejects (a failed release is logged and the proof stays used), and it
 * does nothing for other requests. Not calling it at all keeps the proof consumed.
 */
export type CompleteRequest = (status: number) => Promise<void>;

/** `complete` of a request whose payment (if any) cannot be handed back: nothing to do. */
const completeNothing: CompleteRequest = async () => undefined;

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
  pricing: z.array(PricingEntrySchema).max(32).optional(),
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
/** How long a failed `/supported` lookup of the token's EIP-712 domain is not repeated. */
const DOMAIN_LOOKUP_BACKOFF_MS = 30_000;

type CompiledRoute = {
  /** The one-time offers (what x402 payments are matched against). */
  offers: readonly OneTimeOffer[];
  /** Every pricing entry in order: one-time offers and plan ids, for the 402. */
  slots: readonly (OneTimeOffer | { scheme: "subscription"; planId: string })[];
  /** Plans whose subscribers this route serves. */
  plans: readonly string[];
  units: number | ((request: RouteRequest) => number) | undefined;
  description: string | undefined;
  mimeType: string | undefined;
};

/**
 * Creates a gate. Options are checked here, once; a misconfiguration throws `InvalidRequest` naming
 * the option.
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
  const clock: Clock = config.clock ?? systemClock;
  const random = config.random ?? ((bytes: number) => randomBytes(bytes));
  const logger: GateLogger | undefined = config.logger;
  let memoSecret: Uint8Array;
  if (config.memoSecret === undefined) {
    // Not `random`: that one is injectable for memos and may be deterministic in tests.
    memoSecret = randomBytes(32);
    const note =
      "paymentGate: no memoSecret given, so this process uses a random one. Several instances serving one API must share one secret (e.g. TOLLGATE_MEMO_SECRET), or each refuses the others' memos.";
    if (logger === undefined) process.emitWarning(note, { code: "TOLLGATE_MEMO_SECRET_GENERATED" });
    else logger.warn({}, note);
  } else {
    try {
      memoSecret = memoSecretOf(config.memoSecret);
    } catch (cause) {
      throw new TollgateError(
        "InvalidRequest",
        `paymentGate options: memoSecret: ${(cause as Error).message}`,
      );
    }
  }
  /** The origin of the URL routes functions are given; never the request's `Host`. */
  const routeOrigin = config.publicOrigin ?? "http://localhost";
  const token = typeof config.token === "string" ? { address: config.token } : config.token;
  const decimals = token.decimals ?? USDC_DECIMALS;
  const memoTtlSeconds = config.memoTtlSeconds ?? 300;
  const facilitator: FacilitatorClient =
    typeof config.facilitator === "string"
      ? createFacilitatorClient({ url: config.facilitator, fetch: config.fetch ?? globalThis.fetch })
      : config.facilitator;
  const replayGuard: ReplayGuard = config.replayGuard ?? createMemoryReplayGuard({ clock });
  const checkSignature = signatureCheckOf(config, facilitator, clock);
  const acceptX402 = createX402Settlement({
    settle: settleThroughFacilitator(facilitator),
    replayGuard,
    gateId: x402GateId(memoSecret),
    clock,
    payTo: config.payTo,
    network: config.network,
    token: token.address,
    maxTimeoutSeconds: memoTtlSeconds,
  });

  const toRoute = (route: Exclude<RouteConfig, undefined>, where: string): CompiledRoute => {
    const parsed = parseGateOptions(RouteConfigSchema, route, where);
    const pricing: PricingEntry[] =
      parsed.pricing ??
      (parsed.amount !== undefined
        ? [{ type: "one-time", amount: parsed.amount }]
        : [{ type: "one-time", price: parsed.price as string }]);
    const compiled = compilePricing(pricing, decimals, where, config.publicOrigin);
    if (parsed.units !== undefined && compiled.plans.length === 0) {
      throw new TollgateError(
        "InvalidRequest",
        `paymentGate options: ${where}: metered \`units\` need subscription pricing on the route`,
      );
    }
    return {
      ...compiled,
      units: parsed.units,
      description: parsed.description ?? config.description,
      mimeType: parsed.mimeType,
    };
  };

  const fallback: CompiledRoute | undefined =
    config.pricing === undefined
      ? undefined
      : {
          ...compilePricing(config.pricing, decimals, "pricing", config.publicOrigin),
          units: undefined,
          description: config.description,
          mimeType: undefined,
        };
  const resolveRoute = routeResolverOf(config.routes, fallback, toRoute);

  // Subscriptions (DESIGN.md §2.5): plans read once from the facilitator; state, tokens and metering
  // checked by the subscription gate, whose background work starts with its first request.
  const plans: PlanCatalog = createPlanCatalog({
    facilitator,
    payTo: config.payTo,
    network: config.network,
    token: token.address,
    clock,
    manager: config.subscriptionManager,
  });
  let subscriptions: SubscriptionGate | undefined;
  const subscriptionGate = (): SubscriptionGate => {
    if (subscriptions !== undefined) return subscriptions;
    if (config.publicOrigin === undefined) {
      // compilePricing refuses plans without it; a routes function may still return one.
      throw misconfigured("subscription pricing needs `publicOrigin`, the audience of sub-auth tokens");
    }
    const ledger = config.usageLedger ?? createMemoryUsageLedger({ clock });
    subscriptions = createSubscriptionGate({
      facilitator,
      plans,
      payTo: config.payTo,
      audience: config.publicOrigin,
      clock,
      decimals,
      statusTtlMs: config.subscriptionStatusTtlMs ?? 5_000,
      renewalGraceSeconds: config.subscriptionRenewalGraceSeconds ?? 300,
      eventPollMs: config.subscriptionEventPollMs ?? 1_000,
      providerApiKey: config.providerApiKey,
      metering: {
        ledger,
        flusher:
          config.providerApiKey === undefined
            ? undefined
            : createUsageFlusher({
                ledger,
                facilitator,
                apiKey: config.providerApiKey,
                intervalMs: config.usageFlushIntervalMs ?? 2_000,
                logger,
              }),
        maxUnsettled: toAtomicPrice(config.maxUnsettledUsage ?? "10", decimals, "maxUnsettledUsage"),
        retryAfterSeconds: Math.max(1, Math.ceil((config.usageFlushIntervalMs ?? 2_000) / 1000) + 1),
      },
      logger,
    });
    return subscriptions;
  };

  /** The route's options for the 402: one-time prices as they are, plans with their terms. */
  const offersFor = (route: CompiledRoute): Promise<Offer[]> =>
    Promise.all(
      route.slots.map(async (slot): Promise<Offer> => {
        if (slot.scheme === "exact") return slot;
        const plan = await plans.get(slot.planId);
        const metered = plan.includedUnits > 0n || plan.overageUnitPrice > 0n;
        return {
          scheme: "subscription",
          planId: plan.planId,
          amount: plan.amount,
          interval: plan.interval,
          manager: plan.manager,
          overage: metered
            ? { unitPrice: plan.overageUnitPrice, includedUnits: plan.includedUnits }
            : undefined,
          successorPlanId: plan.deprecated ? plan.successorPlanId : undefined,
        };
      }),
    );

  let tokenEip712 =
    token.name !== undefined && token.version !== undefined
      ? { name: token.name, version: token.version }
      : undefined;
  let domainLookup: Promise<void> | undefined;
  let domainLookupFailedAt = Number.NEGATIVE_INFINITY;
  /** The token's EIP-712 domain for the x402 header, looked up once from the facilitator if not configured. */
  const x402Domain = async () => {
    if (tokenEip712 !== undefined || clock.now() - domainLookupFailedAt < DOMAIN_LOOKUP_BACKOFF_MS) {
      return tokenEip712;
    }
    domainLookup ??= facilitator
      .supported()
      .then((supported) => {
        const found = supported.networks
          .find((n) => n.network === config.network)
          ?.tokens.find((t) => t.address.toLowerCase() === token.address.toLowerCase());
        if (found === undefined) throw new Error("token not listed by the facilitator");
        tokenEip712 = found.eip712;
      })
      .catch((error: unknown) => {
        domainLookupFailedAt = clock.now();
        logger?.warn(
          { err: error },
          "token EIP-712 domain lookup failed; 402s go out without PAYMENT-REQUIRED",
        );
      })
      .finally(() => {
        domainLookup = undefined;
      });
    await domainLookup;
    return tokenEip712;
  };

  const paymentRequired = async (
    error: GateErrorCode,
    message: string,
    request: GateTarget,
    route: CompiledRoute,
  ): Promise<GateResult> => {
    let offers: Offer[];
    try {
      offers = await offersFor(route);
    } catch (fault) {
      return { kind: "respond", response: checkFailure(fault, "the subscription plans could not be read") };
    }
    const built = await compose(error, message, request, route, offers);
    return { kind: "respond", response: paymentRequiredResponse(built) };
  };

  const compose = async (
    error: GateErrorCode,
    message: string,
    request: GateTarget,
    route: CompiledRoute,
    offers: Offer[],
  ) => {
    // The configured origin, never `Host`; without one, the path alone (clients resolve it against
    // the URL they asked).
    const resourceUrl = `${config.publicOrigin ?? ""}${request.target}`;
    return composePaymentRequired({
      error,
      message,
      method: request.method,
      path: request.path,
      query: request.query,
      resourceUrl,
      description: route.description,
      mimeType: route.mimeType,
      offers,
      payTo: config.payTo,
      network: config.network,
      token: token.address,
      tokenEip712: await x402Domain(),
      facilitator: facilitator.url,
      memoSecret,
      memoTtlSeconds,
      clock,
      random,
    });
  };

  /** Logs a failed check and answers it: a misconfiguration as 500 with its message, a fault as 5xx. */
  const checkFailure = (fault: unknown, what: string): Response => {
    if (isMisconfiguration(fault)) {
      logger?.error({ err: fault }, "paymentGate is misconfigured");
      return errorResponse("Internal", (fault as TollgateError).message, 500);
    }
    logger?.warn({ err: fault }, what);
    return faultResponse(fault, `${what}; try again later`);
  };

  /** The subscription as handlers read it, with `deductAllowance` bound to it. */
  const served = (subscription: GateSubscription): ServedSubscription => ({
    ...subscription,
    deductAllowance: async (amount) =>
      subscriptionGate().deduct(subscription.subscriptionId, deductionAmount(amount)),
  });

  /** A request carrying `X-Tollgate-Sub` on a route that accepts subscriptions. */
  const serveSubscription = async (
    subscriptionId: string,
    request: GateRequest,
    route: CompiledRoute,
    target: GateTarget,
  ): Promise<GateResult> => {
    let outcome: Awaited<ReturnType<SubscriptionGate["check"]>>;
    try {
      outcome = await subscriptionGate().check({
        subscriptionId,
        token: request.headers.get(HeaderName.SubscriptionAuth),
        route: request.units === undefined ? route : { ...route, units: request.units },
        routeRequest: { method: target.method, path: target.routePath, url: target.url },
      });
    } catch (fault) {
      return { kind: "respond", response: checkFailure(fault, "a subscription could not be checked") };
    }
    // A metered charge reserved for a failed request is not handed back: the usage ledger has no
    // way to undo a reservation that a flush may already have batched (see docs/gate.md).
    if (outcome.kind === "pass") {
      // The subscriber learns what this metered request counted and was charged, so its own ledger can
      // record it (docs/protocol.md). Only the token's signer, the subscriber, gets this answer.
      const headers = new Headers();
      if (outcome.subscription.units > 0 && outcome.subscription.unitsUsed !== undefined) {
        headers.set(HeaderName.Units, outcome.subscription.units.toString());
        headers.set(HeaderName.OverageCharge, outcome.subscription.charge.toString());
      }
      return {
        kind: "pass",
        subscription: served(outcome.subscription),
        headers,
        complete: completeNothing,
      };
    }
    if (outcome.kind === "busy") {
      return {
        kind: "respond",
        response: errorResponse("RateLimited", outcome.message, 429, outcome.retryAfter),
      };
    }
    logger?.debug({ method: target.method, path: target.path, error: outcome.error }, "subscription refused");
    return paymentRequired(outcome.error, outcome.message, target, route);
  };

  const gate = async function paymentGate(request: GateRequest): Promise<GateResult> {
    const reading = normalizeRequestTarget(request.url);
    if (!reading.ok) {
      return { kind: "respond", response: errorResponse("InvalidRequest", reading.reason, 400) };
    }
    const method = request.method.toUpperCase();
    // The memo binds the normalized path and the query; routes are matched on the path decoded once,
    // as routers see it.
    const path = reading.path;
    const url = new URL(reading.target, routeOrigin);
    const route = resolveRoute({ method, path: reading.routePath, url });
    if (route === undefined) return { kind: "pass", headers: new Headers(), complete: completeNothing };
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
    const target: GateTarget = { ...reading, method, url };

    const subscriptionId = request.headers.get(HeaderName.Subscription);
    if (subscriptionId !== null && route.plans.length > 0) {
      return serveSubscription(subscriptionId, request, route, target);
    }

    const header = request.headers.get(HeaderName.Payment);
    if (header === null) {
      const x402Header = request.headers.get(HeaderName.X402PaymentSignature);
      if (x402Header === null) return paymentRequired("PaymentRequired", "payment required", target, route);
      // x402 v2 (DESIGN.md §2.7): settled through the facilitator before the handler runs, served once;
      // a failed handler does not hand the payment back (the x402 client signs a fresh one).
      const outcome = await acceptX402(x402Header, { offers: route.offers, tokenEip712: await x402Domain() });
      if (outcome.kind === "paid") {
        return { kind: "pass", paid: outcome.payment, headers: outcome.headers, complete: completeNothing };
      }
      if (outcome.kind === "fault") {
        logger?.warn({ err: outcome.error, method, path }, "x402 payment could not be settled");
        return { kind: "respond", response: faultResponse(outcome.error) };
      }
      logger?.debug({ method, path, reason: outcome.reason }, "x402 payment refused");
      const refusal = await paymentRequired(
        "InvalidPaymentProof",
        `x402 payment refused: ${outcome.message}`,
        target,
        route,
      );
      if (refusal.kind === "respond") withX402Reason(refusal.response, outcome.reason);
      return refusal;
    }

    const refuse = (reason: string) => {
      logger?.debug({ method, path, reason }, "payment proof refused");
      return paymentRequired("InvalidPaymentProof", `invalid payment proof: ${reason}`, target, route);
    };
    const parsed = safeParsePaymentProof(header);
    if (!parsed.ok) return refuse(parsed.reason);
    const proof = parsed.proof;
    const minimumAmount = cheapestOneTime(route);
    if (minimumAmount === undefined) return refuse("this request is not sold for a one-time payment");
    const replayKey = proofReplayKey(proof);
    try {
      const verdict = await checkPaymentProof(proof, {
        memoSecret,
        clock,
        expected: {
          method,
          path,
          query: reading.query,
          // A proof pays for this request only if it covers this request's price (a route priced by a
          // function may price another query of the same path higher).
          minimumAmount,
          payTo: config.payTo,
          network: config.network,
          token: token.address,
        },
        checkSignature,
      });
      if (!verdict.valid) return refuse(verdict.reason);
      // Keep the key until the proof itself expires: no proof for it can be accepted after that, and an
      // x402 payload of the same authorization is refused by the facilitator (docs/x402.md).
      if (!(await replayGuard.consume(replayKey, proof.exp * 1000))) return refuse("proof was already used");
    } catch (error) {
      logger?.warn({ err: error, method, path }, "payment proof could not be checked");
      return { kind: "respond", response: faultResponse(error) };
    }

    const paid: GatePayment = {
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
    const headers = new Headers();
    headers.set(
      HeaderName.PaymentResponse,
      encodeJsonHeader({ success: true, transaction: proof.tx, network: proof.network, payer: proof.payer }),
    );
    return { kind: "pass", paid, headers, complete: releaseOnFailure(replayKey, method, path) };
  };

  /** `complete` of a proof payment: hands its key back when the handler failed (status ≥ 500). */
  const releaseOnFailure = (replayKey: string, method: string, path: string): CompleteRequest => {
    let reported = false;
    return async (status) => {
      if (reported) return;
      reported = true;
      if (!(status >= 500)) return;
      try {
        await replayGuard.release(replayKey);
        logger?.warn({ method, path, status }, "handler failed; payment proof released for a retry");
      } catch (error) {
        logger?.warn({ err: error, method, path, status }, "payment proof could not be released");
      }
    };
  };

  /** The specification's `buildPaymentRequired({ plan })`, on this gate's configuration. */
  const buildPaymentRequired = async (request: PaymentRequiredRequest = {}): Promise<PaymentRequired> => {
    const input = parseGateOptions(PaymentRequiredRequestSchema, request ?? {}, "buildPaymentRequired");
    const method = (input.method ?? "GET").toUpperCase();
    const reading = normalizeRequestTarget(input.path ?? "/");
    if (!reading.ok)
      throw new TollgateError("InvalidRequest", `buildPaymentRequired: path: ${reading.reason}`);
    const url = new URL(reading.target, routeOrigin);
    const pricing: PricingEntry[] = [
      ...(input.plan === undefined ? [] : [{ type: "subscription" as const, plan: input.plan }]),
      ...(input.pricing ?? []),
    ];
    let route: CompiledRoute | undefined;
    if (pricing.length > 0) {
      route = {
        ...compilePricing(pricing, decimals, "buildPaymentRequired", config.publicOrigin),
        units: undefined,
        description: input.description ?? config.description,
        mimeType: undefined,
      };
    } else {
      route = resolveRoute({ method, path: reading.routePath, url });
    }
    if (route === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        `buildPaymentRequired: nothing to sell: give { plan } or { pricing }, or the path of a priced route (${method} ${reading.path} is free)`,
      );
    }
    const offers = await offersFor(route);
    const built = await compose(
      input.error ?? "PaymentRequired",
      input.message ?? "payment required",
      { ...reading, method, url },
      route,
      offers,
    );
    return built.body;
  };

  /** The specification's `verifyPaymentProof(proof)` for a proof of this gate's offers. */
  const verifyProof = async (value: unknown): Promise<boolean> => {
    const proof = toPaymentProof(value);
    if (proof === undefined || proof.exp <= unixSeconds(clock)) return false;
    const opened = openMemo(memoSecret, proof.memo);
    if (!opened.ok) return false;
    const memo = opened.payload;
    const sameTerms =
      memo.a === proof.amount &&
      sameAddress(memo.t, proof.payTo) &&
      sameAddress(memo.t, config.payTo) &&
      memo.n === proof.network &&
      memo.n === config.network &&
      sameAddress(memo.k, proof.token) &&
      sameAddress(memo.k, token.address);
    if (!sameTerms) return false;
    return (await checkSignature(proof)).valid;
  };

  const controls: PaymentGateControls = {
    buildPaymentRequired,
    verifyPaymentProof: verifyProof,
    async ready() {
      const planIds = new Set(fallback?.plans ?? []);
      if (config.routes !== undefined && typeof config.routes !== "function") {
        for (const [pattern, route] of Object.entries(config.routes)) {
          for (const planId of toRoute(route, `routes[${JSON.stringify(pattern)}]`).plans)
            planIds.add(planId);
        }
      }
      await Promise.all([...planIds].map((planId) => plans.get(planId)));
    },
    syncEvents: async () => {
      await subscriptions?.syncEvents();
    },
    flushUsage: async () => (subscriptions === undefined ? 0 : subscriptions.flushUsage()),
    close: async () => {
      await subscriptions?.close();
    },
  };
  return Object.assign(gate, controls);
}

/** A request as the gate prices it: method, normalized target, and the URL routes functions see. */
type GateTarget = NormalizedTarget & { method: string; url: URL };

/**
 * The least a one-time payment for this route must be now: its cheapest one-time offer, or `undefined`
 * when the route sells no one-time payment (no proof pays for it).
 */
function cheapestOneTime(route: CompiledRoute): bigint | undefined {
  let cheapest: bigint | undefined;
  for (const offer of route.offers) {
    if (cheapest === undefined || offer.amount < cheapest) cheapest = offer.amount;
  }
  return cheapest;
}

function signatureCheckOf(
  config: {
    proofVerification?: "local" | "remote" | undefined;
    proofKeys?: ProofKeyResolver | { keys: unknown } | undefined;
  },
  facilitator: FacilitatorClient,
  clock: Clock,
): ProofSignatureCheck {
  if (config.proofVerification === "remote") {
    if (config.proofKeys !== undefined) {
      throw new TollgateError(
        "InvalidRequest",
        "paymentGate options: proofKeys is for local proof verification only",
      );
    }
    return checkSignatureWithFacilitator(facilitator);
  }
  const keys = config.proofKeys;
  let resolver: ProofKeyResolver;
  if (keys === undefined) {
    resolver = createJwksResolver({ loadJwks: () => facilitator.jwks(), clock });
  } else if ("resolve" in keys) {
    resolver = keys;
  } else {
    resolver = createStaticKeyResolver(parseGateOptions(JwksSchema, keys, "paymentGate options: proofKeys"));
  }
  return checkSignatureWithKeys(resolver);
}

/** A pricing list as the gate uses it: one-time offers, plan ids, and both in order for the 402. */
function compilePricing(
  pricing: readonly PricingEntry[],
  decimals: number,
  where: string,
  publicOrigin: string | undefined,
): Pick<CompiledRoute, "offers" | "slots" | "plans"> {
  const slots = pricing.map((entry, index): CompiledRoute["slots"][number] => {
    if (entry.type === "subscription") {
      if (publicOrigin === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: ${where}[${index}]: subscription pricing needs \`publicOrigin\`, the audience sub-auth tokens must name`,
        );
      }
      const ref = entry.plan;
      const id = typeof ref === "object" ? ref.planId : ref;
      return { scheme: "subscription", planId: id.toString() };
    }
    const amount =
      entry.amount !== undefined
        ? toAtomicAmount(entry.amount, `${where}[${index}].amount`)
        : toAtomicPrice(entry.price as string, decimals, `${where}[${index}].price`);
    return { scheme: "exact", amount };
  });
  const offers = slots.filter((slot): slot is OneTimeOffer => slot.scheme === "exact");
  const plans = slots.flatMap((slot) => (slot.scheme === "subscription" ? [slot.planId] : []));
  return { offers, slots, plans };
}

/** An `amount` in smallest units (already checked by `AmountSchema`) as a positive uint256. */
function toAtomicAmount(value: Amount, where: string): bigint {
  const problem = amountProblem(value);
  if (problem !== undefined)
    throw new TollgateError("InvalidRequest", `paymentGate options: ${where}: ${problem}`);
  return positiveUint256(BigInt(value), where);
}

function toAtomicPrice(price: Price, decimals: number, where: string): bigint {
  let amount: bigint;
  try {
    amount = typeof price === "bigint" ? price : parseUnitsExact(price, decimals);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `paymentGate options: ${where}: ${(cause as Error).message}`, {
      cause,
    });
  }
  return positiveUint256(amount, where);
}

function positiveUint256(amount: bigint, where: string): bigint {
  if (amount <= 0n)
    throw new TollgateError("InvalidRequest", `paymentGate options: ${where}: a price must be positive`);
  if (amount >= 2n ** 256n)
    throw new TollgateError("InvalidRequest", `paymentGate options: ${where}: above uint256`);
  return amount;
}

function misconfigured(message: string): TollgateError {
  return new TollgateError("InvalidRequest", `paymentGate subscription pricing: ${message}`, {
    details: { reason: "gate_misconfigured" },
  });
}

/** A gate misconfiguration found on first use (a plan that is not the gate's), as opposed to a fault. */
function isMisconfiguration(error: unknown): boolean {
  return (
    error instanceof TollgateError &&
    error.code === "InvalidRequest" &&
    error.details?.reason === "gate_misconfigured"
  );
}

function routeResolverOf(
  routes: Record<string, RouteConfig> | ((request: RouteRequest) => RouteConfig | undefined) | undefined,
  fallback: CompiledRoute | undefined,
  toRoute: (route: RouteConfig, where: string) => CompiledRoute,
): (request: RouteRequest) => CompiledRoute | undefined {
  // CORS preflights carry no payment; pricing them by default would break browsers.
  const byDefault = (request: RouteRequest) => (request.method === "OPTIONS" ? undefined : fallback);
  if (routes === undefined) return byDefault;
  if (typeof routes === "function") {
    // A resolver usually returns a few constant objects: compile each once.
    const compiled = new WeakMap<object, CompiledRoute>();
    return (request) => {
      const route = routes(request);
      if (route === undefined) return byDefault(request);
      let hit = compiled.get(route);
      if (hit === undefined) {
        hit = toRoute(route, `routes(${request.method} ${request.path})`);
        compiled.set(route, hit);
      }
      return hit;
    };
  }
  const table = Object.entries(routes).map(([pattern, route]) => {
    let compiledPattern: ReturnType<typeof compileRoutePattern>;
    try {
      compiledPattern = compileRoutePattern(pattern);
    } catch (cause) {
      throw new TollgateError("InvalidRequest", `paymentGate options: routes: ${(cause as Error).message}`, {
        cause,
      });
    }
    return { pattern: compiledPattern, route: toRoute(route, `routes[${JSON.stringify(pattern)}]`) };
  });
  return (request) => {
    for (const entry of table) if (entry.pattern.matches(request.method, request.path)) return entry.route;
    return byDefault(request);
  };
}

/**
 * A check that could not be carried out. Unavailability and rate limits are passed on with their
 * `Retry-After` (the payer retries the same proof later); anything else is the gate's own fault,
 * reported without internals.
 */
function faultResponse(
  error: unknown,
  internalMessage = "the payment could not be checked; try the same proof again later",
): Response {
  if (error instanceof TollgateError && (error.code === "ChainUnavailable" || error.code === "RateLimited")) {
    return errorResponse(error.code, error.message, httpStatusOf(error.code), error.retryAfter ?? 5);
  }
  return errorResponse("Internal", internalMessage, 500);
}

/** The error body of DESIGN.md §2.6. */
function errorResponse(code: ErrorCode, message: string, status: number, retryAfter?: number): Response {
  const headers: Record<string, string> = { "content-type": "application/json", "cache-control": "no-store" };
  if (retryAfter !== undefined) headers[HeaderName.RetryAfter] = String(retryAfter);
  return new Response(JSON.stringify({ error: { code, message } }), { status, headers });
}
