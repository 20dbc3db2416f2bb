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
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { createFacilitatorClient, type FacilitatorClient } from "../http/facilitatorClient.ts";
import { normalizeAddress } from "../http/rateLimits.ts";
import { USDC_DECIMALS } from "../protocol/amount.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { type GateErrorCode, GateErrorCodeSchema, TollgateError } from "../protocol/errors.ts";
import type { PaymentRequired } from "../protocol/paymentRequired.ts";
import { createSchemeRegistry } from "../schemes/registry.ts";
import type {
  GateScheme,
  GateSchemeContext,
  SchemeId,
  SchemeOffer,
  SchemeOfferEntry,
  SchemePayment,
  SchemeRequest,
  SchemeRoute,
  ServedSubscription,
} from "../schemes/types.ts";
import { createMemoryReplayGuard } from "../store/createMemoryReplayGuard.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import { composePaymentRequiredFromEntries, paymentRequiredResponse } from "./composePaymentRequired.ts";
import type { GateLogger } from "./gateLogger.ts";
import { GatePass } from "./gatePass.ts";
import type { GateRequest, RouteRequest } from "./gateRequest.ts";
import { checkFailureResponse, errorResponse, faultResponse } from "./gateResponses.ts";
import { gateSchemes } from "./gateSchemes.ts";
import { memoSecretOf } from "./memo.ts";
import { normalizeRequestTarget } from "./normalizeRequestTarget.ts";
import {
  type GatePricingEntry,
  GatePricingEntrySchema,
  type PaymentGateOptions,
  PaymentGateOptionsSchema,
  parseGateOptions,
  type RouteConfig,
  RouteConfigSchema,
  SubscriptionPricingSchema,
} from "./paymentGateOptions.ts";
import { RouteRequestView, SchemeRequestView } from "./requestView.ts";
import { compileRoutePattern } from "./routePattern.ts";

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
/** How long a failed `/supported` lookup of the token's EIP-712 domain is not repeated. */
const DOMAIN_LOOKUP_BACKOFF_MS = 30_000;

/** A part that accepts credentials on a route, with its offers there. */
type Acceptor = {
  part: GateScheme & Required<Pick<GateScheme, "credential" | "accept">>;
  route: SchemeRoute;
};

type CompiledRoute = {
  /** Every pricing entry in order, with the part that describes it in the 402. */
  entries: readonly { offer: SchemeOffer; part: GateScheme & Required<Pick<GateScheme, "offer">> }[];
  /** The parts that accept credentials for this route's offers, in precedence order. */
  acceptors: readonly Acceptor[];
  description: string | undefined;
  mimeType: string | undefined;
};

/** A gate's schemes, built once: each part by id, and which offer schemes each accepting part takes. */
type GateParts = {
  byId: ReadonlyMap<SchemeId, GateScheme>;
  /** Parts by the pricing `type` they compile. */
  compilers: ReadonlyMap<string, { id: SchemeId; part: GateScheme }>;
  /** Accepting parts in precedence order, with the offer schemes each takes. */
  accepting: readonly { part: Acceptor["part"]; takes: ReadonlySet<SchemeId> }[];
};

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
  const trustedProxies: ReadonlySet<string> = new Set(
    (config.trustedProxies ?? []).map((address) => normalizeAddress(address) ?? address),
  );
  const token = typeof config.token === "string" ? { address: config.token } : config.token;
  const decimals = token.decimals ?? USDC_DECIMALS;
  const memoTtlSeconds = config.memoTtlSeconds ?? 300;
  const facilitator: FacilitatorClient =
    typeof config.facilitator === "string"
      ? createFacilitatorClient({ url: config.facilitator, fetch: config.fetch ?? globalThis.fetch })
      : config.facilitator;
  const replayGuard: ReplayGuard = config.replayGuard ?? createMemoryReplayGuard({ clock });

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

  const context: GateSchemeContext = {
    payTo: config.payTo,
    network: config.network,
    token: token.address,
    decimals,
    facilitator,
    replayGuard,
    clock,
    random,
    memoSecret,
    memoTtlSeconds,
    publicOrigin: config.publicOrigin,
    logger,
    tokenEip712: x402Domain,
    options: config as GateSchemeContext["options"],
  };
  const parts = buildParts(createSchemeRegistry(gateSchemes, config.schemes ?? []).schemes, context);

  /** Compiles a pricing list: each entry by the part of its `type`, then who accepts what. */
  const compilePricing = (
    pricing: readonly GatePricingEntry[],
    where: string,
  ): Pick<CompiledRoute, "entries" | "acceptors"> & { units?: never } => {
    const offers = pricing.map((entry, index): SchemeOffer => {
      const compiler = parts.compilers.get(entry.type);
      if (compiler?.part.compile === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: ${where}[${index}]: no registered scheme prices type "${entry.type}" (known: ${[...parts.compilers.keys()].join(", ")})`,
        );
      }
      return compiler.part.compile(entry as SchemePricingInput, `${where}[${index}]`);
    });
    const entries = offers.map((offer, index) => {
      const part = parts.byId.get(offer.scheme);
      if (part?.offer === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: ${where}[${index}]: scheme "${offer.scheme}" has no gate part that offers it`,
        );
      }
      return { offer, part: part as CompiledRoute["entries"][number]["part"] };
    });
    return { entries, acceptors: [] };
  };

  const toRoute = (route: Exclude<RouteConfig, undefined>, where: string): CompiledRoute => {
    const parsed = parseGateOptions(RouteConfigSchema, route, where);
    const pricing: GatePricingEntry[] =
      parsed.pricing ??
      (parsed.amount !== undefined
        ? [{ type: "one-time", amount: parsed.amount }]
        : [{ type: "one-time", price: parsed.price as string }]);
    const { entries } = compilePricing(pricing, where);
    if (parsed.units !== undefined && !entries.some((entry) => isPlanOffer(entry.offer))) {
      throw new TollgateError(
        "InvalidRequest",
        `paymentGate options: ${where}: metered \`units\` need subscription pricing on the route`,
      );
    }
    return {
      entries,
      acceptors: acceptorsOf(parts, entries, parsed.units),
      description: parsed.description ?? config.description,
      mimeType: parsed.mimeType,
    };
  };

  const fallback: CompiledRoute | undefined =
    config.pricing === undefined
      ? undefined
      : routeOf(parts, compilePricing(config.pricing, "pricing").entries, config.description);
  const staticRoutes: CompiledRoute[] = fallback === undefined ? [] : [fallback];
  const resolveRoute = routeResolverOf(config.routes, fallback, toRoute, staticRoutes);

  /** The route's 402 entries: each offer described by its scheme's part. */
  const entriesFor = (route: CompiledRoute, request: SchemeRequest): Promise<SchemeOfferEntry[]> =>
    Promise.all(route.entries.map((entry) => entry.part.offer(entry.offer, request)));

  const paymentRequired = async (
    error: GateErrorCode,
    message: string,
    request: SchemeRequest,
    route: CompiledRoute,
  ): Promise<GateResult & { kind: "respond" }> => {
    let entries: SchemeOfferEntry[];
    try {
      entries = await entriesFor(route, request);
    } catch (fault) {
      return {
        kind: "respond",
        response: checkFailureResponse(
          fault,
          "the route's payment terms could not be built (a plan or channel store did not answer)",
          logger,
        ),
      };
    }
    const built = await compose(error, message, request, route, entries);
    return { kind: "respond", response: paymentRequiredResponse(built) };
  };

  const compose = async (
    error: GateErrorCode,
    message: string,
    request: SchemeRequest,
    route: CompiledRoute,
    entries: readonly SchemeOfferEntry[],
  ) =>
    composePaymentRequiredFromEntries({
      error,
      message,
      method: request.method,
      path: request.path,
      query: request.query,
      // The configured origin, never `Host`; without one, the path alone (clients resolve it against
      // the URL they asked).
      resourceUrl: `${config.publicOrigin ?? ""}${request.target}`,
      description: route.description,
      mimeType: route.mimeType,
      entries,
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

  const gate = async function paymentGate(request: GateRequest): Promise<GateResult> {
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
      let outcome: Awaited<ReturnType<Acceptor["part"]["accept"]>>;
      try {
        const accepted = acceptor.part.accept(credential, target, acceptor.route);
        // A part's own promise type (another realm's, a thenable) is awaited too.
        outcome =
          typeof (accepted as { then?: unknown }).then === "function"
            ? await accepted
            : (accepted as typeof outcome);
      } catch (fault) {
        logger?.warn({ err: fault, method, path }, "a payment could not be checked");
        return { kind: "respond", response: faultResponse(fault) };
      }
      if (outcome.kind === "pass") {
        const complete = outcome.complete;
        if (outcome.settleAfterHandler === true && complete !== undefined) {
          // A settlement that failed after the handler ran is answered instead of the handler's answer.
          const pass = outcome as GateResult & { kind: "pass" };
          pass.complete = async (status) => {
            const answer = await complete(status);
            if (answer === undefined) return undefined;
            if (answer.kind === "respond") return answer.response;
            const refusal = await paymentRequired(answer.error, answer.message, target, route);
            answer.decorate?.(refusal.response);
            return refusal.response;
          };
          return pass;
        }
        outcome.complete ??= completeNothing;
        return outcome as GateResult;
      }
      if (outcome.kind === "respond") return outcome;
      const refusal = await paymentRequired(outcome.error, outcome.message, target, route);
      outcome.decorate?.(refusal.response);
      return refusal;
    }
    return paymentRequired("PaymentRequired", "payment required", target, route);
  };

  /** The specification's `buildPaymentRequired({ plan })`, on this gate's configuration. */
  const buildPaymentRequired = async (request: PaymentRequiredRequest = {}): Promise<PaymentRequired> => {
    const input = parseGateOptions(PaymentRequiredRequestSchema, request ?? {}, "buildPaymentRequired");
    const method = (input.method ?? "GET").toUpperCase();
    const reading = normalizeRequestTarget(input.path ?? "/");
    if (!reading.ok)
      throw new TollgateError("InvalidRequest", `buildPaymentRequired: path: ${reading.reason}`);
    const url = new URL(reading.target, routeOrigin);
    const pricing: GatePricingEntry[] = [
      ...(input.plan === undefined ? [] : [{ type: "subscription" as const, plan: input.plan }]),
      ...(input.pricing ?? []),
    ];
    let route: CompiledRoute | undefined;
    if (pricing.length > 0) {
      route = routeOf(
        parts,
        compilePricing(pricing, "buildPaymentRequired").entries,
        input.description ?? config.description,
      );
    } else {
      route = resolveRoute({ method, path: reading.routePath, url });
    }
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
    const entries = await entriesFor(route, target);
    const built = await compose(
      input.error ?? "PaymentRequired",
      input.message ?? "payment required",
      target,
      route,
      entries,
    );
    return built.body;
  };

  const allParts = [...parts.byId.values()];
  const proofParts = allParts.filter((part) => part.verifyProof !== undefined);
  const controls: PaymentGateControls = {
    buildPaymentRequired,
    /** The specification's `verifyPaymentProof(proof)`: asks each part that has proofs, in order. */
    async verifyPaymentProof(proof) {
      for (const part of proofParts) if (await part.verifyProof?.(proof)) return true;
      return false;
    },
    async ready() {
      // Every static route's offers, by the part that accepts them, read once each.
      const byPart = new Map<GateScheme, SchemeOffer[]>();
      for (const route of staticRoutes) {
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
  return Object.assign(gate, controls);
}

/** What a part's `compile` is given. */
type SchemePricingInput = Readonly<Record<string, unknown>> & { type: string };

/** Whether an offer is a plan (the subscription scheme's offers carry a `planId`). */
function isPlanOffer(offer: SchemeOffer): boolean {
  return typeof (offer as { planId?: unknown }).planId === "string";
}

/** Builds every scheme's gate part for one gate, once. */
function buildParts(
  schemes: readonly {
    id: SchemeId;
    gate?:
      | {
          pricingTypes: readonly string[];
          accepts?: readonly SchemeId[];
          create(c: GateSchemeContext): GateScheme;
        }
      | undefined;
  }[],
  context: GateSchemeContext,
): GateParts {
  const byId = new Map<SchemeId, GateScheme>();
  const compilers = new Map<string, { id: SchemeId; part: GateScheme }>();
  const accepting: { part: Acceptor["part"]; takes: ReadonlySet<SchemeId> }[] = [];
  for (const scheme of schemes) {
    if (scheme.gate === undefined) continue;
    const part = scheme.gate.create(context);
    byId.set(scheme.id, part);
    for (const type of scheme.gate.pricingTypes) compilers.set(type, { id: scheme.id, part });
    if (part.accept !== undefined && part.credential !== undefined) {
      accepting.push({
        part: part as Acceptor["part"],
        takes: new Set(scheme.gate.accepts ?? [scheme.id]),
      });
    }
  }
  return { byId, compilers, accepting };
}

/** The parts that accept credentials for a route's offers, each with its offers there, in precedence order. */
function acceptorsOf(
  parts: GateParts,
  entries: CompiledRoute["entries"],
  units: SchemeRoute["units"],
): Acceptor[] {
  const all = entries.map((entry) => entry.offer);
  const acceptors: Acceptor[] = [];
  for (const { part, takes } of parts.accepting) {
    const offers = all.filter((offer) => takes.has(offer.scheme));
    if (offers.length > 0) acceptors.push({ part, route: { offers, all, units } });
  }
  return acceptors;
}

function routeOf(
  parts: GateParts,
  entries: CompiledRoute["entries"],
  description: string | undefined,
): CompiledRoute {
  return { entries, acceptors: acceptorsOf(parts, entries, undefined), description, mimeType: undefined };
}

function routeResolverOf(
  routes: Record<string, RouteConfig> | ((request: RouteRequest) => RouteConfig | undefined) | undefined,
  fallback: CompiledRoute | undefined,
  toRoute: (route: RouteConfig, where: string) => CompiledRoute,
  staticRoutes: CompiledRoute[],
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
    const compiled = toRoute(route, `routes[${JSON.stringify(pattern)}]`);
    staticRoutes.push(compiled);
    return { pattern: compiledPattern, route: compiled };
  });
  return (request) => {
    for (const entry of table) if (entry.pattern.matches(request.method, request.path)) return entry.route;
    return byDefault(request);
  };
}
