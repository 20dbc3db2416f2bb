/**
 * A specialist's HTTP app (docs/agents.md, specialists): its payment gate, the manifest and health
 * routes, the MCP endpoint, the reseller's sale admission and one POST route per capability. What
 * the app sets up (the gate, the MCP server) is kept in the specialist's state as it is built, so
 * `stop()` closes whatever a failed start opened.
 */
import { randomBytes } from "node:crypto";
import type { serve } from "@hono/node-server";
import { type Context, type ErrorHandler, Hono } from "hono";
import type { Hex } from "viem";
import { honoPaymentGate, type PaymentGateEnv } from "../gate/honoPaymentGate.ts";
import { type GatePayment, paymentGate } from "../gate/paymentGate.ts";
import type { GatePricingEntry, RouteConfig } from "../gate/paymentGateOptions.ts";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { peerAddressOf } from "../http/rateLimits.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { MANIFEST_PATH, type Manifest, type ManifestPricing } from "../protocol/manifest.ts";
import { pricingOfCapability, pricingToWire } from "../protocol/pricing.ts";
import type { ServedSubscription } from "../schemes/types.ts";
import type { AgentSalePart, SaleSetup } from "./agentScheme.ts";
import { defaultAgentSchemes } from "./agentSchemes.ts";
import { capabilityUnits, readCapabilityInput } from "./capabilityUnits.ts";
import { type SpecialistMcp, specialistMcp } from "./mcp/specialistMcp.ts";
import {
  admissionMiddleware,
  admissionOf,
  createOfferBook,
  fundedSale,
  OFFER_TTL_MS,
  type OfferBook,
  type SaleTicket,
} from "./saleAdmission.ts";
import type { CreateSpecialistOptions, SpecialistChannels, SpecialistPlan } from "./specialistOptions.ts";
import type { Capability, CapabilityContext, CapabilityPricing } from "./tools/capability.ts";

const BodyLimit = 256 * 1024;

/** What a specialist has built and opened so far; `start()` fills it and `stop()` empties it. */
export type SpecialistState = {
  url: string | undefined;
  manifest: Manifest | undefined;
  signedManifest: { manifest: Manifest; signature: Hex } | undefined;
  server: ReturnType<typeof serve> | undefined;
  gate: ReturnType<typeof paymentGate> | undefined;
  mcp: SpecialistMcp | undefined;
};

/** What the specialist's parts share: its options and the effects chosen once at construction. */
export type SpecialistContext = {
  options: CreateSpecialistOptions;
  memoSecret: Uint8Array;
  fetch: FetchFn;
  clock: Clock;
};

export function pathOf(capability: Capability): string {
  return `/${capability.name}`;
}

/** What the specialist has set up to sell under, as the listed schemes' sale parts read it. */
function saleSetup(plan: SpecialistPlan | undefined, channels: SpecialistChannels | undefined): SaleSetup {
  return { plan, channelsContract: channels?.contract };
}

/**
 * The sale part of the scheme listing `entry`'s type, having checked that the specialist has what
 * that scheme needs (a plan, a channels contract); throws `InvalidRequest` when it lacks it.
 */
function salePartOf(capability: Capability, entry: CapabilityPricing, setup: SaleSetup): AgentSalePart {
  const sale = defaultAgentSchemes.listing(entry.type)?.sale;
  const missing = sale === undefined ? "no scheme sells under it" : sale.missing(setup);
  if (sale === undefined || missing !== undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `capability ${capability.name} is priced by ${entry.type} but ${missing}`,
      { details: { capability: capability.name } },
    );
  }
  return sale;
}

/** The manifest's pricing entries for one capability. */
export function manifestPricing(
  capability: Capability,
  plan: SpecialistPlan | undefined,
  channels?: SpecialistChannels | undefined,
): ManifestPricing[] {
  const setup = saleSetup(plan, channels);
  return capability.pricing.map((p): ManifestPricing => {
    salePartOf(capability, p, setup);
    const pricing = pricingOfCapability(p, { plan, channels: channels?.contract });
    if (pricing === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        `capability ${capability.name} is priced by ${p.type} but has no plan`,
        {
          details: { capability: capability.name },
        },
      );
    }
    return pricingToWire(pricing);
  });
}

/** The gate's pricing entries for one capability, as the scheme of each entry sells it. */
function gatePricing(
  capability: Capability,
  plan: SpecialistPlan | undefined,
  channels: SpecialistChannels | undefined,
): RouteConfig {
  const setup = saleSetup(plan, channels);
  const pricing: GatePricingEntry[] = capability.pricing.map((p) =>
    salePartOf(capability, p, setup).gateEntry(p, setup),
  );
  const metered = plan !== undefined && plan.includedUnits > 0 && plan.overageUnitPrice > 0n;
  return {
    pricing,
    description: capability.description.slice(0, 1024),
    mimeType: "application/json",
    ...(metered ? { units: 1 } : {}),
  };
}

/**
 * The sale a paid call is, for handlers that spend on it (a reseller): a one-time payment is keyed by
 * what names that payment alone and comes back with a re-sent proof (the proof's memo; an x402
 * payment's authorization nonce) — never by its settling transaction, which the facilitator shares
 * among the payments it settles in one batch; a subscription call by its subscription and a random
 * suffix (each call is its own sale), and it earned the overage it was charged.
 */
function saleOf(
  payment: GatePayment | undefined,
  subscription: ServedSubscription | undefined,
): CapabilityContext["sale"] {
  if (payment !== undefined) {
    // A payment that is never re-sent (a channel voucher) is its own sale.
    const key =
      "memo" in payment && typeof payment.memo === "string"
        ? `payment:${payment.memo}`
        : "x402" in payment
          ? `x402:${payment.x402.nonce}`
          : `${payment.scheme}:${randomBytes(8).toString("hex")}`;
    return { key, earned: payment.amount };
  }
  if (subscription !== undefined) {
    return {
      // No proof is re-sent for a subscription call: each call is its own sale.
      key: `subscription:${subscription.subscriptionId}:${randomBytes(8).toString("hex")}`,
      earned: subscription.charge,
    };
  }
  return undefined;
}

/** The specialist's payment gate over one route per capability, bound to the public `origin`. */
function specialistGate(context: SpecialistContext, origin: string): ReturnType<typeof paymentGate> {
  const { options } = context;
  const routes: Record<string, RouteConfig> = {};
  for (const c of options.capabilities)
    routes[`POST ${pathOf(c)}`] = gatePricing(c, options.plans?.[c.name], options.channels);
  return paymentGate({
    payTo: options.account.address,
    network: options.network,
    token: options.token,
    facilitator: options.facilitator,
    memoSecret: context.memoSecret,
    routes,
    publicOrigin: origin,
    fetch: context.fetch,
    clock: context.clock,
    ...(options.replayGuard === undefined ? {} : { replayGuard: options.replayGuard }),
    ...(options.providerApiKey === undefined ? {} : { providerApiKey: options.providerApiKey }),
    ...(options.trustedProxies === undefined ? {} : { trustedProxies: [...options.trustedProxies] }),
    ...(options.channels === undefined
      ? {}
      : {
          schemeOptions: {
            channel: {
              contract: options.channels.contract,
              ...(options.channels.journal === undefined ? {} : { journal: options.channels.journal }),
              ...(options.channels.minDeposit === undefined
                ? {}
                : { minDeposit: options.channels.minDeposit }),
            },
          },
        }),
    // The gate logs through the specialist's logger (a pino logger has the debug level it needs).
    ...(options.logger !== undefined && "debug" in options.logger ? { logger: options.logger } : {}),
    description: options.description ?? options.name,
  } as Parameters<typeof paymentGate>[0]);
}

/** The app's error answer: a Tollgate error with its own body, anything else an opaque 500. */
function capabilityErrors(logger: CreateSpecialistOptions["logger"]): ErrorHandler<PaymentGateEnv> {
  return (error) => {
    if (error instanceof TollgateError) {
      // A handler's own failure (code Internal: e.g. a reseller whose supplier failed) is told to the
      // buyer with its message, which Tollgate code wrote; anything else thrown stays opaque.
      if (error.code === "Internal") logger?.error({ err: error }, "capability failed");
      return new Response(JSON.stringify(error.toBody()), {
        status: error.status,
        headers: { "content-type": "application/json" },
      });
    }
    logger?.error({ err: error }, "capability failed");
    return new Response(JSON.stringify({ error: { code: "Internal", message: "the capability failed" } }), {
      status: 500,
      headers: { "content-type": "application/json" },
    });
  };
}

/**
 * A reseller's open offers, one book per capability that admits sales, shared by HTTP and MCP: a 402
 * answered on one transport keeps its sale for a proof presented on either (a memo binds the route,
 * not the transport).
 */
function offerBooksOf(capabilities: readonly Capability[], clock: Clock): Map<Capability, OfferBook> {
  const offerBooks = new Map<Capability, OfferBook>();
  for (const capability of capabilities) {
    if (admissionOf(capability) !== undefined) {
      offerBooks.set(capability, createOfferBook(clock, OFFER_TTL_MS));
    }
  }
  return offerBooks;
}

/** The POST handler of one capability: its checked input to its handler, with the sale it is. */
function capabilityRoute(capability: Capability, tickets: WeakMap<Request, SaleTicket>) {
  return async (c: Context<PaymentGateEnv>) => {
    const input = await readCapabilityInput(c, capability, BodyLimit);
    const output = await capability.handler(input, {
      signal: c.req.raw.signal,
      sale: fundedSale(saleOf(c.get("payment"), c.get("subscription")), tickets.get(c.req.raw)),
    });
    return c.json(output as Record<string, unknown>);
  };
}

/**
 * The specialist's app for the public `origin`; the gate and the MCP server go into `state` as they
 * are made. Middleware order: units read, then a reseller's sale admission, then the gate.
 */
export function buildSpecialistApp(
  context: SpecialistContext,
  state: SpecialistState,
  origin: string,
): Hono<PaymentGateEnv> {
  const { options } = context;
  const gate = specialistGate(context, origin);
  state.gate = gate;
  const app = new Hono<PaymentGateEnv>();
  app.onError(capabilityErrors(options.logger));
  app.get(MANIFEST_PATH, (c) => {
    if (state.signedManifest === undefined)
      throw new TollgateError("NotFound", "the manifest is not published yet");
    return c.json(state.signedManifest);
  });
  app.get("/healthz", (c) => c.json({ status: "ok" }));
  const offerBooks = offerBooksOf(options.capabilities, context.clock);
  const mcp = specialistMcp(options, {
    gate,
    pathOf,
    pricing: (c) => manifestPricing(c, options.plans?.[c.name], options.channels),
    sale: saleOf,
    offers: (c) => offerBooks.get(c),
  });
  state.mcp = mcp;
  if (mcp !== undefined) {
    app.all(mcp.path, (c) => mcp.handle(c.req.raw, peerAddressOf(c.env)));
  }
  // A capability's units(input) decide what a metered call draws: read before the gate reserves.
  const units = capabilityUnits(options.capabilities, pathOf, BodyLimit);
  app.use("*", units.readUnits);
  // A reseller's sale is reserved in its budget before the gate honours a payment (saleAdmission.ts).
  const tickets = new WeakMap<Request, SaleTicket>();
  for (const capability of options.capabilities) {
    const admission = admissionOf(capability);
    const offers = offerBooks.get(capability);
    if (admission === undefined || offers === undefined) continue;
    app.use(`${pathOf(capability)}`, admissionMiddleware({ admission, offers, tickets }));
  }
  app.use("*", honoPaymentGate(units.withUnits(gate)));
  for (const capability of options.capabilities)
    app.post(pathOf(capability), capabilityRoute(capability, tickets));
  return app;
}
