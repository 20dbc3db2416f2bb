/**
 * What `paymentGate` is configured with, checked once at construction so that a misconfigured gate
 * fails at start-up with a message naming the option, never on a request.
 */
import { isIP } from "node:net";
import type { PublicClient } from "viem";
import { z } from "zod";
import type { FacilitatorClient, FetchFn } from "../http/facilitatorClient.ts";
import { AddressSchema } from "../protocol/address.ts";
import { parseUnitsExact } from "../protocol/amount.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { NetworkSchema } from "../protocol/network.ts";
import { HttpUrlSchema, PlanIdSchema } from "../protocol/paymentRequired.ts";
import { OriginSchema } from "../protocol/subscriptionAuth.ts";
import type { Scheme, SchemeGateOptions } from "../schemes/types.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import { type Amount, AmountSchema, amountProblem } from "./amount.ts";
import type { GateLogger } from "./gateLogger.ts";
import type { RouteRequest } from "./gateRequest.ts";

/**
 * A bound given as a `bigint` in the token's smallest unit or as decimal token text (`"10"` = 10 USDC),
 * converted exactly with the token's decimals (`maxUnsettledUsage`). Never a float.
 */
export const PriceSchema = z.union([z.bigint(), z.string()]);
export type Price = z.input<typeof PriceSchema>;

/** Decimal token text (`"0.50"` = 0.50 USDC), converted exactly with the token's decimals. */
export const PriceTextSchema = z
  .custom<string>((value) => ["string", "bigint", "number"].includes(typeof value), {
    error: 'expected decimal token text such as "0.50"',
  })
  .superRefine((value, ctx) => {
    const problem = priceProblem(value);
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
  });

/** Why a value cannot be a `price` in token text, naming what the writer probably meant. */
export function priceProblem(value: unknown): string | undefined {
  if (typeof value === "string") return undefined;
  if (typeof value === "bigint") {
    return `price ${value}n is a bigint, but price is decimal token text ("0.50"); for ${value} smallest units write amount: ${value}n`;
  }
  if (typeof value === "number") {
    return `price ${value} is a number, but prices are never floats: write price: "${value}" for ${value} USDC, or amount: <integer> for smallest units`;
  }
  return 'expected decimal token text such as "0.50"';
}

const oneOfAmountAndPrice = (entry: { amount?: unknown; price?: unknown }) =>
  (entry.amount === undefined) !== (entry.price === undefined);
const amountAndPriceError =
  'give exactly one of `amount` (smallest units: 500000) and `price` (token text: "0.50"), which are two readings of one price';

/**
 * Pay once per request: `amount` in smallest units (`500000`, `500_000n`, `"500000"`) or `price` in
 * token text (`"0.50"`), exactly one of them.
 */
export const OneTimePricingSchema = z
  .strictObject({
    type: z.literal("one-time"),
    amount: AmountSchema.optional(),
    price: PriceTextSchema.optional(),
  })
  .refine(oneOfAmountAndPrice, { error: amountAndPriceError });

/** An on-chain plan id: decimal text, a bigint, or `{ planId }` (as `GET /plans/:id` returns it). */
const PlanRefSchema = z.union([PlanIdSchema, z.bigint().nonnegative()]);

/**
 * A subscription plan of `SubscriptionManager` (docs/gate.md): its subscribers are served without a
 * payment per request. The plan must be sold by the gate's `payTo` in the gate's token; its terms are
 * read from the facilitator (`GET /plans/:id`) and put into the 402.
 */
export const SubscriptionPricingSchema = z.strictObject({
  type: z.literal("subscription"),
  plan: z.union([PlanRefSchema, z.looseObject({ planId: PlanRefSchema })]),
});

/**
 * A plan that meters (included units, overage price): the same as `subscription` (its subscribers are
 * served without a payment per request, each use drawing the route's `units` from the allowance),
 * named as the discovery manifest names it.
 */
export const MeteredPricingSchema = z.strictObject({
  type: z.literal("metered"),
  plan: SubscriptionPricingSchema.shape.plan,
});

/** A gate pricing entry of a built-in scheme (`src/schemes`); extra schemes add their own `type`s. */
export const PricingEntrySchema = z.discriminatedUnion("type", [
  OneTimePricingSchema,
  SubscriptionPricingSchema,
  MeteredPricingSchema,
]);
export type PricingEntry = z.input<typeof PricingEntrySchema>;

/** The `type`s of the built-in pricing entries, checked by `PricingEntrySchema`. */
const BUILTIN_PRICING_TYPES: ReadonlySet<string> = new Set(["one-time", "subscription", "metered"]);

/** A pricing entry of a scheme passed in `schemes`: its `type` and its own terms, checked by that scheme. */
export type SchemePricingEntry = { type: string } & Record<string, unknown>;

/**
 * A pricing entry as the gate's options take it: a built-in entry (checked here), or an entry of
 * another `type`, checked at construction by the registered scheme that compiles that type.
 */
export const GatePricingEntrySchema = z
  .custom<PricingEntry | SchemePricingEntry>(
    (value) =>
      typeof value === "object" && value !== null && typeof (value as { type?: unknown }).type === "string",
    { error: 'expected a pricing entry such as { type: "one-time", price: "0.50" }' },
  )
  .superRefine((value, ctx) => {
    if (!BUILTIN_PRICING_TYPES.has(value.type)) return;
    const parsed = PricingEntrySchema.safeParse(value);
    if (parsed.success) return;
    for (const issue of parsed.error.issues) {
      ctx.addIssue({ code: "custom", message: issue.message, path: issue.path });
    }
  });
export type GatePricingEntry = z.input<typeof GatePricingEntrySchema>;

/**
 * Metered units of one request, counted against a subscription's allowance: a number, or computed from
 * the request. `0` leaves the route unmetered even under a plan that meters.
 */
const UnitsSchema = z.union([
  z.int().nonnegative(),
  z.custom<(request: RouteRequest) => number>((value) => typeof value === "function", {
    error: "expected a positive integer or a function",
  }),
]);

/**
 * How one route is priced: `pricing`, or the shorthand `amount` (smallest units) / `price` (token text)
 * for `pricing: [{ type: "one-time", amount | price }]` — exactly one of the three.
 */
export const RouteConfigSchema = z
  .strictObject({
    pricing: z.array(GatePricingEntrySchema).min(1).max(32).optional(),
    /** Smallest units, as on the wire: `500000`, `500_000n` or `"500000"` (0.50 USDC). */
    amount: AmountSchema.optional(),
    /** Decimal token text: `"0.50"` (0.50 USDC). */
    price: PriceTextSchema.optional(),
    /** Shown to payers in the 402 and in x402's `resource.description`. */
    description: z.string().max(1024).optional(),
    /** Media type of the paid response (x402's `resource.mimeType`). */
    mimeType: z.string().max(255).optional(),
    /**
     * Metered units per use, counted against a subscription's included units and overage cap. Default:
     * 1 when the subscription's plan meters (included units or an overage price), else none.
     */
    units: UnitsSchema.optional(),
  })
  .refine(
    (route) => [route.pricing, route.amount, route.price].filter((given) => given !== undefined).length === 1,
    {
      error:
        'give exactly one of `pricing`, `amount` (smallest units: 500000) and `price` (token text: "0.50")',
    },
  );
export type RouteConfig = z.input<typeof RouteConfigSchema>;

/** Prices a request by code: return `undefined` to leave the request free. */
export type RouteResolver = (request: RouteRequest) => RouteConfig | undefined;

const isFunction = (value: unknown) => typeof value === "function";
const hasMethods =
  (...names: string[]) =>
  (value: unknown) =>
    typeof value === "object" &&
    value !== null &&
    names.every((name) => typeof (value as Record<string, unknown>)[name] === "function");

/**
 * An option a scheme's gate part reads and checks itself in `create`, typed by the scheme
 * (`SchemeGateOptions`): the gate only lets it through.
 */
const SchemeOptionSchema = z.unknown();

export const PaymentGateOptionsSchema = z.strictObject({
  /** The address paid. */
  payTo: AddressSchema,
  /** CAIP-2 network, e.g. `eip155:8453`. */
  network: NetworkSchema,
  /**
   * The token (USDC) address, or the address with its EIP-712 `name`/`version` (for the x402 header;
   * looked up from the facilitator's `/supported` when absent) and `decimals` (for text prices; 6).
   */
  token: z.union([
    AddressSchema,
    z.strictObject({
      address: AddressSchema,
      name: z.string().min(1).max(128).optional(),
      version: z.string().min(1).max(32).optional(),
      decimals: z.int().min(0).max(77).optional(),
    }),
  ]),
  /** The facilitator's base URL, or a client for it. */
  facilitator: z.union([
    HttpUrlSchema,
    z.custom<FacilitatorClient>(hasMethods("authorize", "verify", "jwks", "supported"), {
      error: "expected an http(s) URL or a facilitator client",
    }),
  ]),
  /**
   * HMAC key for memos: at least 32 random bytes (a string counts as its UTF-8 bytes), never one
   * printed anywhere; every gate instance serving one API shares it. Read it from the environment.
   * Absent: a random secret for this process, with a warning, which is right for one instance only
   * (another instance refuses its memos). Weak or published secrets throw (`memoSecretWeakness`).
   */
  memoSecret: z.union([z.instanceof(Uint8Array), z.string()]).optional(),
  /** Pricing of every request through the gate that no entry of `routes` prices. */
  pricing: z.array(GatePricingEntrySchema).min(1).max(32).optional(),
  /**
   * Payment schemes besides the built-in ones (`src/schemes`, docs/schemes.md), after them in
   * precedence; each prices the entries of its gate part's `pricingTypes`. A scheme never replaces a
   * built-in one.
   */
  schemes: z
    .array(
      z.custom<Scheme>(
        (value) => typeof value === "object" && value !== null && typeof (value as Scheme).id === "string",
        { error: "expected a scheme (defineScheme)" },
      ),
    )
    .max(16)
    .optional(),
  /** Settings of extra schemes, by scheme id; each scheme reads and checks its own. */
  schemeOptions: z.record(z.string(), z.unknown()).optional(),
  /** Per-route pricing by `"METHOD /path/:param/*"` pattern (first match wins), or a function. */
  routes: z
    .union([
      z.record(z.string(), RouteConfigSchema),
      z.custom<RouteResolver>(isFunction, { error: "expected an object of route patterns or a function" }),
    ])
    .optional(),
  /** Default description for the 402 and x402's `resource.description`. */
  description: z.string().max(1024).optional(),
  /** Remembers consumed memos. Default: in memory, for one process. */
  replayGuard: z
    .custom<ReplayGuard>(
      (value) =>
        hasMethods("consume", "release")(value) &&
        // Claims come as a pair: one without the other would hold proofs in flight for good.
        (hasMethods("claim", "settle")(value) ||
          ((value as ReplayGuard).claim === undefined && (value as ReplayGuard).settle === undefined)),
      { error: "expected a ReplayGuard (claim and settle both, or neither)" },
    )
    .optional(),
  clock: z.custom<Clock>(hasMethods("now"), { error: "expected a Clock" }).optional(),
  /** The `fetch` the facilitator client uses when `facilitator` is a URL (default: the global one). */
  fetch: z.custom<FetchFn>(isFunction, { error: "expected a fetch function" }).optional(),
  /** Random bytes for memos (default `crypto.randomBytes`). */
  random: z.custom<(bytes: number) => Uint8Array>(isFunction, { error: "expected a function" }).optional(),
  /**
   * `local` (default): Ed25519 against the facilitator's JWKS, fetched once and refreshed on an
   * unknown `kid`. `remote`: ask the facilitator's `POST /verify` for each proof.
   */
  proofVerification: z.enum(["local", "remote"]).optional(),
  /** Proof keys for local verification instead of fetching the JWKS (`SchemeGateOptions`). */
  proofKeys: SchemeOptionSchema.optional(),
  /** How long a 402 offer stands (default 300 s). */
  memoTtlSeconds: z.int().min(10).max(3600).optional(),
  /**
   * How long a proof (`X-PAYMENT`) is held in flight for the request it was accepted on (default 60 s),
   * when the replay guard has claims: the gate's promise that a handler it runs answers within it. A
   * proof whose request never completed (the gate died) is accepted again for the same request after
   * this, up to twice; a handler still running past it may be run a second time by such a retry.
   */
  proofLeaseSeconds: z.int().min(1).max(3600).optional(),
  /**
   * The origin clients reach this API at (`https://api.example.com`): the origin of `resource.url` in
   * 402s, and the audience every sub-auth token must name. Required with subscription pricing. The
   * request's `Host` is never used: without this option, `resource.url` is the path alone (`/api/x?q`),
   * which clients resolve against the URL they asked.
   */
  publicOrigin: OriginSchema.optional(),
  /**
   * Addresses of the reverse proxies in front of this API, whose `X-Forwarded-For` is believed when the
   * request came from one of them (`GateRequest.remoteAddress`). Empty (the default) believes no header:
   * the peer the adapter saw is the client (`SchemeRequest.client`, which per-client limits share by).
   */
  trustedProxies: z
    .array(z.string().refine((a) => isIP(a) !== 0, { message: "must be an IP address" }))
    .max(256)
    .optional(),
  /** The SubscriptionManager (default: the one the facilitator's `/supported` lists for `network`). */
  subscriptionManager: AddressSchema.optional(),
  /**
   * How long a subscription's state read from the chain is trusted (default 5 000 ms; at most 60 s).
   * Facilitator events drop it sooner (see `subscriptionEventPollMs`).
   */
  subscriptionStatusTtlMs: z.int().min(0).max(60_000).optional(),
  /**
   * Chain seconds an Active subscription is still served after its paid period ended while the renewal
   * has not been collected (default 300; at most a day). Past it the subscription is refused with
   * `SubscriptionNotActive` ("renewal is overdue") until a collect starts the next period, so stalled
   * renewals (keeper down) are not served free. Keep it above your keeper's interval and run time.
   */
  subscriptionRenewalGraceSeconds: z.int().min(0).max(86_400).optional(),
  /**
   * How often the facilitator's event feed is polled (default 1 000 ms; 0 = only on `syncEvents()`).
   * The feed needs `providerApiKey`; without it no events are read and statuses live out their TTL.
   */
  subscriptionEventPollMs: z.int().min(0).max(60_000).optional(),
  /**
   * The provider's facilitator API key (`POST /providers`), with which metered charges are sent to
   * `POST /usage` and the facilitator's event feed is read (`GET /events`, to drop a paused or
   * cancelled subscription at once). Required when a metered plan is sold; keep it secret.
   */
  providerApiKey: z.string().min(8).max(256).optional(),
  /** Counts metered use (`SchemeGateOptions`). */
  usageLedger: SchemeOptionSchema.optional(),
  /**
   * Most metered charges (all subscriptions together) served but not yet settled on chain: past it,
   * metered requests that would charge are answered 429 `RateLimited` until settlements catch up.
   * A bigint in smallest units, or token text (default "10", 10 USDC).
   */
  maxUnsettledUsage: PriceSchema.optional(),
  /** How often metered charges are sent to the facilitator (default 2 000 ms; 0 = only on `flushUsage()`). */
  usageFlushIntervalMs: z.int().min(0).max(600_000).optional(),
  /**
   * A client of the gate's chain (a viem `PublicClient`, or anything with its `request`), for subscribers
   * that are smart-contract wallets (ERC-1271): a wallet's sub-auth token is signed by a key the wallet
   * trusts, which only the wallet's `isValidSignature` can vouch for (a gas-capped `eth_call`, at most 30
   * per subscriber a minute). Without it only tokens signed by the subscriber's own key pass.
   */
  chainClient: z
    .custom<Pick<PublicClient, "request">>(hasMethods("request"), { error: "expected a viem public client" })
    .optional(),
  logger: z
    .custom<GateLogger>(hasMethods("debug", "warn", "error"), { error: "expected a logger (pino)" })
    .optional(),
});
export type PaymentGateOptions = z.input<typeof PaymentGateOptionsSchema> & SchemeGateOptions;
export type ParsedPaymentGateOptions = z.output<typeof PaymentGateOptionsSchema>;

/** Parses options, turning zod's issues into one `InvalidRequest` that names each bad option. */
export function parseGateOptions<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.map(String).join(".") || "options"}: ${issue.message}`)
    .join("; ");
  throw new TollgateError("InvalidRequest", `${what}: ${problems}`, { cause: result.error });
}

/** An `amount` option in smallest units (already checked by `AmountSchema`) as a positive uint256. */
export function atomicAmountOf(value: Amount, where: string): bigint {
  const problem = amountProblem(value);
  if (problem !== undefined)
    throw new TollgateError("InvalidRequest", `paymentGate options: ${where}: ${problem}`);
  return positiveUint256(BigInt(value), where);
}

/** A `price` option (token text, or a bigint of smallest units) as a positive uint256. */
export function atomicPriceOf(price: Price, decimals: number, where: string): bigint {
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
