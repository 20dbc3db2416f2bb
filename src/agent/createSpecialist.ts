/**
 * `createSpecialist` (docs/agents.md, specialists): serves each capability behind the payment gate,
 * publishes the signed manifest at `/.well-known/tollgate.json`, and registers it with a market.
 * A specialist is an ordinary Tollgate seller; it may also hold its own payer and budget and buy from
 * other specialists inside its handlers (the reseller in agents/ does).
 */
import { randomBytes } from "node:crypto";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { Logger } from "pino";
import type { Address, Hex } from "viem";
import { z } from "zod";
import { honoPaymentGate, type PaymentGateEnv } from "../gate/honoPaymentGate.ts";
import { type GatePayment, paymentGate } from "../gate/paymentGate.ts";
import type { GatePricingEntry, RouteConfig } from "../gate/paymentGateOptions.ts";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { peerAddressOf } from "../http/rateLimits.ts";
import { createMarketClient, type MarketClient } from "../market/marketClient.ts";
import { type Clock, systemClock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  MANIFEST_PATH,
  type Manifest,
  type Capability as ManifestCapability,
  type ManifestPricing,
  type ManifestSigner,
  signManifest,
} from "../protocol/manifest.ts";
import { pricingOfCapability, pricingToWire } from "../protocol/pricing.ts";
import type { ServedSubscription } from "../schemes/types.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import type { AgentSalePart, SaleSetup } from "./agentScheme.ts";
import { defaultAgentSchemes } from "./agentSchemes.ts";
import { capabilityUnits } from "./capabilityUnits.ts";
import {
  type SpecialistMcp,
  type SpecialistMcpOptions,
  specialistMcp,
  specialistMcpPath,
} from "./mcp/specialistMcp.ts";
import {
  admissionMiddleware,
  admissionOf,
  createOfferBook,
  fundedSale,
  OFFER_TTL_MS,
  type OfferBook,
  type SaleTicket,
} from "./saleAdmission.ts";
import type { Capability, CapabilityContext, CapabilityPricing } from "./tools/capability.ts";

export type SpecialistPlan = {
  planId: string;
  /** The plan's terms as created on chain (for the manifest); amounts in smallest units. */
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
  manager: Address;
};

export type CreateSpecialistOptions = {
  name: string;
  description?: string | undefined;
  /** The payout account: receives payments and signs the manifest. */
  account: ManifestSigner;
  capabilities: readonly Capability[];
  facilitator: string;
  network: `eip155:${number}`;
  token: Address;
  /** On-chain plans for capabilities priced by subscription, by capability name. */
  plans?: Readonly<Record<string, SpecialistPlan>> | undefined;
  /** Provider API key at the facilitator (needed to record metered usage). */
  providerApiKey?: string | undefined;
  /**
   * The reverse proxies in front of the specialist, whose `X-Forwarded-For` its gate believes (the
   * gate's `trustedProxies`; default none): its per-client limits share by the client behind them.
   */
  trustedProxies?: readonly string[] | undefined;
  /** A market to register with on `start()`. */
  market?: string | MarketClient | undefined;
  memoSecret?: Uint8Array | undefined;
  replayGuard?: ReplayGuard | undefined;
  host?: string | undefined;
  port?: number | undefined;
  fetch?: FetchFn | undefined;
  clock?: Clock | undefined;
  logger?: Pick<Logger, "info" | "warn" | "error"> | undefined;
  /**
   * The capabilities as MCP tools behind the same gate (docs/mcp.md): Streamable HTTP at `path` on
   * this app (default `/mcp`, listed in the manifest) and `serveMcp(transport)` for stdio; `false`: none.
   */
  mcp?: SpecialistMcpOptions | undefined;
  /**
   * Prepaid channels for capabilities priced `{ type: "channel" }` (docs/channels.md): the
   * `TollgateChannels` contract, and the gate's voucher journal and minimum deposit. Vouchers are
   * handed to the facilitator with `providerApiKey`.
   */
  channels?: SpecialistChannels | undefined;
};

/** The gate's channel settings for a specialist. */
export type SpecialistChannels = {
  contract: Address;
  /** The gate's voucher journal (default `.tollgate/channel-vouchers.journal`). */
  journal?: string | undefined;
  /** The smallest deposit accepted, smallest unit (default: the price). */
  minDeposit?: bigint | undefined;
};

export type Specialist = {
  readonly name: string;
  readonly payTo: Address;
  /** Listens, builds and signs the manifest, and registers with the market. */
  start(): Promise<{ url: string; manifest: Manifest }>;
  stop(): Promise<void>;
  /** Sends metered usage recorded by the gate to the facilitator now; resolves with the records sent. */
  flushUsage(): Promise<number>;
  readonly url: string | undefined;
  readonly manifest: Manifest | undefined;
  /** Serves the capabilities over an MCP transport (e.g. stdio) until it closes; after `start()`. */
  serveMcp(transport: Parameters<SpecialistMcp["connect"]>[0]): Promise<void>;
};

const BodyLimit = 256 * 1024;

function pathOf(capability: Capability): string {
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
function manifestPricing(
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

/**
 * @example
 * const specialist = createSpecialist({ name: "summarizer", account, capabilities: [summarize],
 *   facilitator, network: "eip155:31337", token: usd, market: "http://127.0.0.1:4030" });
 * const { url } = await specialist.start();
 */
export function createSpecialist(options: CreateSpecialistOptions): Specialist {
  const clock = options.clock ?? systemClock;
  const fetch = options.fetch ?? globalThis.fetch;
  const memoSecret = options.memoSecret ?? randomBytes(32);
  const names = new Set<string>();
  for (const c of options.capabilities) {
    if (names.has(c.name))
      throw new TollgateError("InvalidRequest", `capability name ${c.name} is used twice`);
    names.add(c.name);
    // Fail at construction, not at the first buyer, when a subscription capability has no plan.
    manifestPricing(c, options.plans?.[c.name], options.channels);
  }
  const mcpPath = specialistMcpPath(options.mcp, options.capabilities.map(pathOf));

  let url: string | undefined;
  let manifest: Manifest | undefined;
  let signedManifest: { manifest: Manifest; signature: Hex } | undefined;
  let server: ReturnType<typeof serve> | undefined;
  let gate: ReturnType<typeof paymentGate> | undefined;
  let mcp: SpecialistMcp | undefined;

  const buildApp = (origin: string) => {
    const routes: Record<string, RouteConfig> = {};
    for (const c of options.capabilities)
      routes[`POST ${pathOf(c)}`] = gatePricing(c, options.plans?.[c.name], options.channels);
    gate = paymentGate({
      payTo: options.account.address,
      network: options.network,
      token: options.token,
      facilitator: options.facilitator,
      memoSecret,
      routes,
      publicOrigin: origin,
      fetch,
      clock,
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
    const app = new Hono<PaymentGateEnv>();
    app.onError((error) => {
      if (error instanceof TollgateError) {
        // A handler's own failure (code Internal: e.g. a reseller whose supplier failed) is told to the
        // buyer with its message, which Tollgate code wrote; anything else thrown stays opaque.
        if (error.code === "Internal") options.logger?.error({ err: error }, "capability failed");
        return new Response(JSON.stringify(error.toBody()), {
          status: error.status,
          headers: { "content-type": "application/json" },
        });
      }
      options.logger?.error({ err: error }, "capability failed");
      return new Response(JSON.stringify({ error: { code: "Internal", message: "the capability failed" } }), {
        status: 500,
        headers: { "content-type": "application/json" },
      });
    });
    app.get(MANIFEST_PATH, (c) => {
      if (signedManifest === undefined)
        throw new TollgateError("NotFound", "the manifest is not published yet");
      return c.json(signedManifest);
    });
    app.get("/healthz", (c) => c.json({ status: "ok" }));
    // A reseller's open offers, one book per capability, shared by HTTP and MCP: a 402 answered on
    // one transport keeps its sale for a proof presented on either (a memo binds the route, not the transport).
    const offerBooks = new Map<Capability, OfferBook>();
    for (const capability of options.capabilities) {
      if (admissionOf(capability) !== undefined) {
        offerBooks.set(capability, createOfferBook(clock, OFFER_TTL_MS));
      }
    }
    mcp = specialistMcp(options, {
      gate,
      pathOf,
      pricing: (c) => manifestPricing(c, options.plans?.[c.name], options.channels),
      sale: saleOf,
      offers: (c) => offerBooks.get(c),
    });
    if (mcp !== undefined) {
      app.all(mcp.path, (c) => (mcp as SpecialistMcp).handle(c.req.raw, peerAddressOf(c.env)));
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
    for (const capability of options.capabilities) {
      app.post(pathOf(capability), async (c) => {
        const length = Number(c.req.header("content-length") ?? "0");
        if (length > BodyLimit)
          throw new TollgateError("PayloadTooLarge", `request body over ${BodyLimit} bytes`);
        let body: unknown;
        try {
          body = await c.req.json();
        } catch (cause) {
          throw new TollgateError("InvalidRequest", "request body is not JSON", { cause });
        }
        const input = capability.input.safeParse(body);
        if (!input.success) {
          throw new TollgateError("InvalidRequest", `input does not match ${capability.name}'s schema`, {
            details: {
              issues: input.error.issues
                .slice(0, 10)
                .map((i) => ({ path: i.path.join("."), message: i.message })),
            },
          });
        }
        const output = await capability.handler(input.data, {
          signal: c.req.raw.signal,
          sale: fundedSale(saleOf(c.get("payment"), c.get("subscription")), tickets.get(c.req.raw)),
        });
        return c.json(output as Record<string, unknown>);
      });
    }
    return app;
  };

  return {
    name: options.name,
    payTo: options.account.address,
    get url() {
      return url;
    },
    get manifest() {
      return manifest;
    },
    async start() {
      if (url !== undefined && manifest !== undefined) return { url, manifest };
      const host = options.host ?? "127.0.0.1";
      // The gate binds sub-auth tokens to the public origin, which is only known once listening.
      let app: Hono<PaymentGateEnv> | undefined;
      const listening = await new Promise<{ port: number }>((resolve, reject) => {
        server = serve(
          {
            fetch: (request: Request) =>
              app === undefined ? new Response("starting", { status: 503 }) : app.fetch(request),
            port: options.port ?? 0,
            hostname: host,
          },
          (info) => resolve(info),
        );
        server.once("error", reject);
      });
      url = `http://${host}:${listening.port}`;
      app = buildApp(url);
      // Refused at start rather than at the first buyer: a price under the facilitator's minimum, or a
      // plan that is not this seller's (the gate's ready()).
      try {
        await gate?.ready();
      } catch (error) {
        await gate?.close();
        server?.close();
        server = undefined;
        url = undefined;
        throw error;
      }
      const capabilities: ManifestCapability[] = options.capabilities.map((c) => ({
        name: c.name,
        description: c.description,
        method: "POST",
        path: pathOf(c),
        input: z.toJSONSchema(c.input, {
          io: "input",
          unrepresentable: "any",
        }) as ManifestCapability["input"],
        output: z.toJSONSchema(c.output, { unrepresentable: "any" }) as ManifestCapability["output"],
        pricing: manifestPricing(c, options.plans?.[c.name], options.channels),
      }));
      manifest = {
        version: "1",
        name: options.name,
        description: options.description ?? options.name,
        seller: { payTo: options.account.address, name: options.name },
        baseUrl: url,
        facilitator: options.facilitator,
        network: options.network,
        token: options.token,
        capabilities,
        ...(mcpPath === undefined ? {} : { mcp: { url: `${url}${mcpPath}` } }),
        issuedAt: unixSeconds(clock),
      };
      signedManifest = (await signManifest(options.account, manifest)) as {
        manifest: Manifest;
        signature: Hex;
      };
      if (options.market !== undefined) {
        const market =
          typeof options.market === "string"
            ? createMarketClient({ url: options.market, fetch })
            : options.market;
        await market.register(signedManifest);
        options.logger?.info({ specialist: options.name, market: market.url }, "registered with the market");
      }
      return { url, manifest };
    },
    flushUsage: async () => (gate === undefined ? 0 : gate.flushUsage()),
    async serveMcp(transport) {
      if (mcp === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          "serveMcp: start() the specialist first, with mcp not false",
        );
      }
      await mcp.connect(transport);
    },
    async stop() {
      await gate?.close();
      gate = undefined;
      const s = server;
      server = undefined;
      if (s === undefined) return;
      await new Promise<void>((resolve) => {
        s.close(() => resolve());
        (s as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
    },
  };
}
