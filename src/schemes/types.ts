/**
 * The payment-scheme plug-in seam (docs/schemes.md; docs/architecture.md, "The scheme seam"). A scheme is one folder under
 * `src/schemes/<id>/` exporting a `Scheme`: narrow parts for the gate (compile its pricing entries,
 * build its `accepts` entries, find and accept its credential on a request) and for the client (tell
 * whether it can pay an option, what one call costs, pay). Its facilitator part (check, settle) is a
 * separate `FacilitatorScheme`, registered by the facilitator, so that a gate never loads facilitator
 * code.
 *
 * Invariants the dispatcher (`paymentGate`) keeps for every gate part:
 * - `create` runs once per gate, at construction; `compile` runs once per pricing entry, at
 *   construction (a routes function's entries: once per returned object). Nothing of the registry is
 *   looked up per request: a route holds its compiled offers and the parts that accept them.
 * - `credential` is asked of a route's parts in registration order (subscription, then exact, then
 *   x402 exact, then extra schemes); the first part that finds its credential on the request owns the
 *   request, and only it is asked to `accept`.
 * - A refusal is data (`refuse`): the dispatcher answers it with a fresh 402 of the route's offers. A
 *   check that could not be carried out throws; the dispatcher answers 5xx without internals
 *   (`ChainUnavailable` and `RateLimited` pass on their `Retry-After`).
 * - `pass.complete(status)` is awaited by the Hono, Express and `node:http` adapters after the handler
 *   and before the response leaves: it is the "persist before respond" hook (a scheme that must never
 *   answer without having stored what it was paid with may store there, or in `accept` before the
 *   handler runs, which also covers hosts that never call `complete`).
 *
 * Types keyed by scheme: a scheme adds its payment type (what handlers see as `c.get("payment")`) to
 * `SchemePayments` by declaration merging, so `GatePayment` is the union over registered schemes.
 *
 * Stability: the channel scheme is built against these types. Changes are additive only.
 */
import type { Hono } from "hono";
import type { Address } from "viem";
import type { FacilitatorClient } from "../http/facilitatorClient.ts";
import type { Clock } from "../protocol/clock.ts";
import type { GateErrorCode } from "../protocol/errors.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentOption, PaymentRequired, TollgateExtension } from "../protocol/paymentRequired.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";

/** A scheme's id: what its `accepts` entries carry as `scheme` (`exact`, `subscription`, `channel`). */
export type SchemeId = string;

/**
 * Per-scheme payment types, keyed by scheme id. A scheme whose accepted requests carry a payment adds
 * it from its own folder:
 *
 * @example
 * declare module "../types.ts" {
 *   interface SchemePayments { channel: ChannelPayment }
 * }
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled by declaration merging, one entry per scheme.
export interface SchemePayments {}

/** What every scheme payment has in common; a `SchemePayments` entry must extend it. */
export type SchemePaymentBase = {
  scheme: SchemeId;
  payer: Address;
  /** What this request was charged, smallest unit. */
  amount: bigint;
  payTo: Address;
  network: Network;
  token: Address;
};

/** The payment a gate accepted for a request, over every registered scheme. */
export type SchemePayment = SchemePayments[keyof SchemePayments];

/**
 * The subscription a request can be served under, keyed by scheme id: a scheme that serves
 * subscribers adds what handlers read of it (`c.get("subscription")`, `res.locals.subscription`)
 * from its own folder, as `SchemePayments`:
 *
 * @example
 * declare module "../types.ts" {
 *   interface SchemeSubscriptions { subscription: SubscriptionServed }
 * }
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled by declaration merging, one entry per scheme.
export interface SchemeSubscriptions {}

/** The subscription a gate served a request under, over every registered scheme. */
export type ServedSubscription = SchemeSubscriptions[keyof SchemeSubscriptions];

/**
 * Types of the gate options a scheme's part reads and checks itself (`usageLedger`, `proofKeys`), by
 * option name: a scheme adds each from its own folder by declaration merging, so `paymentGate`'s
 * options are typed without the core naming the scheme. The gate passes them through unchecked; the
 * part checks them in `create` (`GateSchemeContext.options`).
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled by declaration merging, one entry per option.
export interface SchemeGateOptions {}

/** The logger gate parts write to; a pino logger satisfies it. */
export type SchemeLogger = {
  debug(object: object, message?: string): void;
  warn(object: object, message?: string): void;
  error(object: object, message?: string): void;
};

/** What a gate part is built with: the gate's configuration and injected effects, fixed per gate. */
export type GateSchemeContext = {
  payTo: Address;
  network: Network;
  token: Address;
  /** The token's decimals, for prices given as token text. */
  decimals: number;
  facilitator: FacilitatorClient;
  /** The gate's replay guard (memory, PostgreSQL or Redis), shared by every instance of one API. */
  replayGuard: ReplayGuard;
  clock: Clock;
  random: (bytes: number) => Uint8Array;
  /** The gate's HMAC key: memos, and any identity a scheme derives per API (never sent anywhere). */
  memoSecret: Uint8Array;
  /** How long an offer stands, seconds. */
  memoTtlSeconds: number;
  /** The configured public origin (`https://api.example.com`), or `undefined`. */
  publicOrigin: string | undefined;
  logger: SchemeLogger | undefined;
  /** The token's EIP-712 `{ name, version }`, looked up once from the facilitator when not configured. */
  tokenEip712(): Promise<{ name: string; version: string } | undefined>;
  /**
   * The whole options object the gate was given, for a scheme's own settings (built-ins read theirs,
   * e.g. `providerApiKey`; an extra scheme reads `schemeOptions[id]`). Read once, in `create`.
   */
  options: Readonly<Record<string, unknown>> & { schemeOptions?: Readonly<Record<string, unknown>> };
};

/** A request as gate parts see it, normalized once by the dispatcher. */
export type SchemeRequest = {
  /** Upper-case method. */
  method: string;
  /** The normalized path (what memos bind). */
  path: string;
  /** The query without `?`, as sent (`""` for none). */
  query: string;
  /** The path decoded once, as routers match it. */
  routePath: string;
  /** Path and query (`/api/x?q`). */
  target: string;
  /** That target on `publicOrigin` (`http://localhost` without one); never the request's `Host`. */
  url: URL;
  headers: { get(name: string): string | null };
  /** Metered units the host set for this request (`GateRequest.units`), if any. */
  units: number | undefined;
  /**
   * Who sent the request, as a key to share per-client limits by: the client's address as the host's
   * server saw it (`GateRequest.remoteAddress`; behind the gate's `trustedProxies`, from
   * `X-Forwarded-For`), an IPv6 client by its /64. Undefined when the host did not say.
   */
  client?: string | undefined;
};

/**
 * One pricing entry of a route after its scheme compiled it. `scheme` names the part that builds its
 * `accepts` entry and accepts its credential (a `metered` entry compiles to a `subscription` offer);
 * `amount` is the price of one request under it when it has one (a one-time price, a channel's price
 * per request), which x402 and one-time proofs are checked against.
 */
export type SchemeOffer = { readonly scheme: SchemeId; readonly amount?: bigint | undefined };

/** The offers of one route that one part accepts, and what the route says about units. */
export type SchemeRoute<Offer extends SchemeOffer = SchemeOffer> = {
  /** This part's offers on the route, in pricing order. */
  offers: readonly Offer[];
  /** Every offer of the route, of every scheme, in pricing order. */
  all: readonly SchemeOffer[];
  /** Metered units per use as configured on the route (number or function of the request). */
  units: number | ((request: { method: string; path: string; url: URL }) => number) | undefined;
};

/**
 * An `accepts` entry as a part describes it; the dispatcher adds `network`, `token`, `payTo`, a fresh
 * memo binding `amount`, `resource`, `description` and the facilitator's URL.
 */
export type SchemeOfferEntry = {
  scheme: SchemeId;
  /** The amount the entry states: the price per request, or per period for a plan. */
  amount: bigint;
  /** Terms in the `tollgate` extension property (`planId`, `interval`, `manager`, `overage`, …). */
  tollgate?: Omit<Partial<TollgateExtension>, "facilitator" | "subscriptionScheme"> | undefined;
  /** Scheme-specific terms, JSON (the `extra` of the entry; a channel's escrow, minimum deposit, …). */
  extra?: Record<string, unknown> | undefined;
  /** Whether a standard x402 client may pay this entry with x402 `exact` (`PAYMENT-REQUIRED`). */
  x402?: boolean | undefined;
};

/** What a part answers for a request that carries its credential. */
export type SchemeAcceptance =
  | {
      kind: "pass";
      /** The payment, for handlers (`c.get("payment")`). */
      paid?: SchemePayment | undefined;
      /** The subscription served under (the subscription and metered schemes). */
      subscription?: ServedSubscription | undefined;
      /** Headers added to the handler's response (`X-PAYMENT-RESPONSE`, a channel's receipt). */
      headers: Headers;
      /**
       * Told the handler's status before the response leaves (500 when it threw); adapters await it.
       * Never rejects. Default: nothing to do. Only with `settleAfterHandler` may it answer a
       * `SchemeCompletion`, which replaces the handler's response.
       */
      complete?:
        | ((status: number) => Promise<void>)
        | ((status: number) => Promise<SchemeCompletion | undefined>)
        | undefined;
      /**
       * The payment is settled by `complete`, after the handler (x402 `exact`: verify, run, settle on
       * success). The adapters then hold the handler's whole response until `complete` resolved, read
       * `headers` after it (it adds the settlement to them), and send what it answers instead when the
       * settlement failed.
       */
      settleAfterHandler?: true | undefined;
    }
  | {
      kind: "refuse";
      error: GateErrorCode;
      /** For people; the 402's `message`. */
      message: string;
      /** Adjusts the fresh 402 the dispatcher builds (e.g. x402's reason header). */
      decorate?: ((response: Response) => void) | undefined;
    }
  | { kind: "respond"; response: Response };

/**
 * What a `settleAfterHandler` part's `complete` answers when the payment could not be settled after
 * the handler ran: a refusal (the dispatcher answers it with a fresh 402 of the route's offers) or a
 * response (a 5xx). The handler's response is not sent then.
 */
export type SchemeCompletion = Extract<SchemeAcceptance, { kind: "refuse" } | { kind: "respond" }>;

/**
 * One scheme's part in one gate, built once by `GateSchemePart.create`. `offer`, `credential` and
 * `accept` are required of a part that compiles offers of its own id or accepts other schemes' offers
 * (`GateSchemePart.accepts`); a part whose `compile` returns offers of another scheme (`metered`
 * compiles to `subscription` offers) omits them. The gate checks this at construction.
 */
export type GateScheme<Offer extends SchemeOffer = SchemeOffer> = {
  /**
   * Checks one pricing entry of this scheme's `pricingTypes` (already known to be an object with that
   * `type`) and compiles it. Throws `InvalidRequest` naming `where` for a bad entry.
   */
  compile?(entry: Readonly<Record<string, unknown>> & { type: string }, where: string): Offer;
  /** The `accepts` entry for one offer of this part. May read the facilitator (plan terms). */
  offer?(offer: Offer, request: SchemeRequest): SchemeOfferEntry | Promise<SchemeOfferEntry>;
  /**
   * The credential this request carries for this part (a header's value), or `null` when it carries
   * none: then the next part is asked. Must be cheap: one or two header reads, no allocation.
   */
  credential?(request: SchemeRequest, route: SchemeRoute<Offer>): string | null;
  /**
   * Verifies and charges a request that carries this part's credential. May answer without a promise
   * when it needs no wait (the subscription part from its caches): the gate then awaits nothing.
   */
  accept?(
    credential: string,
    request: SchemeRequest,
    route: SchemeRoute<Offer>,
  ): SchemeAcceptance | Promise<SchemeAcceptance>;
  /**
   * The gate's `verifyPaymentProof(proof)` for this part's proofs (object or header text): `true` when
   * the proof pays one of this gate's offers, without consuming it. A part without proofs omits it.
   */
  verifyProof?(proof: unknown): Promise<boolean>;
  /** Optional lifecycle, run by the gate's controls of the same name. */
  ready?(offers: readonly Offer[]): Promise<void>;
  syncEvents?(): Promise<void>;
  flushUsage?(): Promise<number>;
  close?(): Promise<void>;
};

/**
 * What an MCP tool call (`mcpPaymentGate`) carries of a part's payment, as the HTTP headers the gate
 * reads and writes (docs/mcp.md). The `_meta` values were checked against the wire's shapes first
 * (`McpPaymentMetaSchema`).
 */
export type SchemeMcpMeta = {
  /**
   * `_meta` key of a credential → the request header the gate reads it from (a plain copy of one string),
   * or the headers it becomes (an x402 payload encoded, a subscription's id and token apart). A value that
   * cannot become headers throws `TollgateError`, answered as 400 `InvalidRequest` naming the key.
   */
  credentials?: Readonly<Record<string, string | ((value: unknown) => Readonly<Record<string, string>>)>>;
  /** Response header of a paid request → the `_meta` key a paid tool result carries it under. */
  receipts?: Readonly<Record<string, string>>;
};

/** The gate side of a scheme: which pricing entries it compiles, and how it is built per gate. */
export type GateSchemePart<Offer extends SchemeOffer = SchemeOffer, Resolved = never> = {
  /**
   * The `type`s of gate pricing entries this part compiles (`{ type: "one-time", amount }`). Empty for
   * a part that only accepts credentials for other parts' offers (x402 `exact` pays `one-time` offers).
   */
  pricingTypes: readonly string[];
  /**
   * Ids of other schemes whose offers this part also accepts credentials for (x402 `exact` accepts for
   * `exact` offers). Default: its own id only.
   */
  accepts?: readonly SchemeId[];
  create(context: GateSchemeContext): GateScheme<Offer>;
  /**
   * The `accepts` entry of an offer whose terms its caller resolved (`composePaymentRequired`), without
   * a gate: a part whose `offer` reads nothing describes its own offers so; a part whose `offer` reads
   * terms (a plan's, from the facilitator) takes them resolved.
   */
  entryOf?(offer: Resolved): SchemeOfferEntry;
  /** Its credentials and receipts in an MCP tool call's `_meta`. */
  mcp?: SchemeMcpMeta;
};

/** What a client part knows of the payer. */
export type SchemePayer = {
  address: Address;
  network: Network;
  facilitator: FacilitatorClient;
};

/** What a client part is given to pay one option for one request. */
export type ClientPayContext = {
  payer: SchemePayer;
  /** The most this payment may cost, smallest unit. */
  maxAmount: bigint;
  /** The request being paid for (buffered; read its URL and method, not its body). */
  request: Request;
  signal?: AbortSignal | undefined;
  clock: Clock;
};

/** A payment a client part made: the headers to send the request again with. */
export type ClientPayment = {
  headers: Record<string, string>;
  /** What this call costs, smallest unit (for ledgers and `onPayment`). */
  amount: bigint;
  /** Scheme-specific receipt (an `exact` payment's proof, a channel's voucher). */
  receipt?: unknown;
};

/** The client side of a scheme: choose, sign, pay. */
export type ClientSchemePart = {
  /** Whether this payer can pay `option` at all (network, facilitator, terms it understands). */
  payable(option: PaymentOption, payer: SchemePayer): boolean;
  /** What one call costs under `option`, smallest unit: what choosers compare with `maxPrice`. */
  callPrice(option: PaymentOption): bigint;
  /**
   * Pays `option` for the request and returns the credential headers. Throws `TollgateError`
   * (`PriceCeilingExceeded`, `AuthorizationExpired`, a facilitator code) when it cannot.
   * Absent for a scheme whose options are taken out otherwise (subscriptions).
   */
  pay?(option: PaymentOption, context: ClientPayContext): Promise<ClientPayment>;
  /**
   * Credential headers to send before any 402 (a subscription held for the origin, an open channel
   * for a known route), or `undefined`. Lets a paid call cost one HTTP exchange.
   */
  upFront?(request: Request, payer: SchemePayer): Promise<Record<string, string> | undefined>;
  /** Told how the server answered a request paid by this part (a channel books its voucher). */
  settled?(payment: ClientPayment, response: Response): void | Promise<void>;
  /**
   * Its payments are the one-time payments the payer makes itself (`payer.pay`, a proof sent as
   * `X-PAYMENT`): `payer.pay(terms)` chooses among its options, `fetchWithPayment` tells `onPayment` of
   * them, and a request whose standing credential the gate refused may fall back to them.
   */
  oneTime?: boolean | undefined;
  /**
   * The request paid with `payment` was answered 5xx: sends it again with the same credential (a proof
   * the gate hands back when its handler fails) and answers the response that ends the call, or throws
   * (`PaidRequestFailed`). Absent: the 5xx is the answer.
   */
  resend?(payment: ClientPayment, failed: Response, context: ClientResendContext): Promise<Response>;
  /**
   * Built once per `fetchWithPayment`, checking the part's own options there: what the part does for a
   * call besides paying one option (keep a credential over a request's attempts, take out a plan,
   * pay a 402 whose terms only it reads).
   */
  flows?(context: ClientFlowContext): ClientFlows;
};

/** What a part's `resend` is given: the request, and the caller's limits on re-sending it. */
export type ClientResendContext = {
  request: Request;
  send(headers: Record<string, string>): Promise<Response>;
  clock: Clock;
  sleep(ms: number): Promise<void>;
  /** Re-sends allowed after the first 5xx. */
  maxResends: number;
  /** The wait before a re-send when the 5xx names none (`Retry-After`), ms. */
  delayMs: number;
  /** The longest wait honoured, ms: a longer one ends the call. */
  maxDelayMs: number;
};

/** What a part's `flows` are built with, once per `fetchWithPayment`. */
export type ClientFlowContext = {
  /** The payer as given: a part reads what it needs of it (its subscriptions, its account). */
  payer: SchemePayer;
  /** The most one payment may cost, smallest unit. */
  maxPrice: bigint;
  clock: Clock;
  /** The options `fetchWithPayment` was given, for the part's own settings and hooks. */
  options: Readonly<Record<string, unknown>>;
};

/** One request of a `fetchWithPayment` call, as a part's flows see it. */
export type ClientFlowRequest = {
  /** The request (buffered; read its URL, method and signal). */
  request: Request;
  /** Sends the request with these headers added. */
  send(headers?: Record<string, string>): Promise<Response>;
  /** The options of a 402 the payer pays once (`oneTime` parts) within the ceiling, cheapest first. */
  oneTimeOptions(accepts: readonly PaymentOption[]): PaymentOption[];
  /** Why none of a 402's options can be paid once within the ceiling. */
  noOneTimeOption(accepts: readonly PaymentOption[]): Error;
  /** Whether `option` is paid once by a `oneTime` part. */
  isOneTime(option: PaymentOption | undefined): boolean;
};

/** What a part does for a `fetchWithPayment` call besides paying one option; each member optional. */
export type ClientFlows = {
  /** Opens the part's state for one request: a credential it keeps over the request's attempts. */
  session?(request: ClientFlowRequest): ClientSession;
  /** The default chooser's pick before the cheapest option paid once (a plan the caller allowed). */
  prefer?(offered: readonly PaymentOption[]): PaymentOption | undefined;
  /**
   * Pays a 402 that states its terms only in a form this part reads (no Tollgate body) and answers the
   * paid retry's response, or the 402 itself when the part declines; `undefined` when the 402 is not
   * of its kind.
   */
  payUnread?(response: Response, request: ClientFlowRequest): Promise<Response | undefined>;
};

/** A part's state over one request's attempts (a subscription it sends up front or takes out). */
export type ClientSession = {
  /** Headers to send with the first attempt (a credential held for the origin), or `undefined`. */
  upFront(): Promise<Record<string, string> | undefined>;
  /**
   * A 402 answered the request while it carried this session's credential: send it again with other
   * headers, pay one option once for this call instead, or `pass` (the 402 is paid as usual, the
   * credential dropped). Throws when the call must end with the refusal.
   */
  refused(paymentRequired: PaymentRequired): Promise<ClientRefusalOutcome>;
  /** Takes out a chosen option of this part's scheme (subscribes) and answers the headers to send. */
  take?(option: PaymentOption, paymentRequired: PaymentRequired): Promise<Record<string, string>>;
};

/** What a session answers to a 402 to its credential. */
export type ClientRefusalOutcome =
  | { kind: "send"; headers: Record<string, string> }
  | { kind: "payOnce"; option: PaymentOption }
  | { kind: "pass" };

/**
 * A payment scheme: its id and its parts. Declare it with `defineScheme` in `src/schemes/<id>/index.ts`
 * and register it in `builtinSchemes` — or pass it to `paymentGate({ schemes: [...] })` and
 * `fetchWithPayment(fetch, payer, { schemes: [...] })`.
 */
export type Scheme<Id extends SchemeId = SchemeId> = {
  readonly id: Id;
  /** One line for docs and errors. */
  readonly description: string;
  // biome-ignore lint/suspicious/noExplicitAny: each part is typed by its own offer; the registry is not.
  readonly gate?: GateSchemePart<any, any> | undefined;
  readonly client?: ClientSchemePart | undefined;
  /** The agent's part (`AgentSchemePart`): how an agent describes, checks and weighs the scheme's offers. */
  readonly agent?: SchemeAgentPart | undefined;
};

/**
 * The agent's part of a scheme. Declared by the agent (`AgentSchemePart`, src/agent/agentScheme.ts)
 * and merged in here, so that the scheme seam names no agent type.
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled by declaration merging from src/agent/agentScheme.ts.
export interface SchemeAgentPart {}

/** What a facilitator part is given: the request body as received (it parses it with zod itself). */
export type FacilitatorSchemeRequest = { body: unknown; signal?: AbortSignal | undefined };

/** The answer of a facilitator part's check. */
export type FacilitatorCheck = { valid: true } | { valid: false; reason: string };

/**
 * A facilitator part built for one facilitator. Everything a scheme does in the facilitator comes
 * from here: its HTTP routes (`/authorize`, `/x402/*`, `/subscriptions`, `/usage`, `/channels`), its
 * background work (renewals, usage deductions, channel claims) and, where the scheme has a one-shot
 * check and settlement, those as functions (the same code its routes run).
 */
export type FacilitatorSchemeInstance<Settled = unknown> = {
  /**
   * Checks a payment without moving money (`exact`: a proof; x402 `exact`: a payload). Absent for a
   * scheme whose payments are checked only on its own routes or by gates.
   */
  check?(request: FacilitatorSchemeRequest): Promise<FacilitatorCheck>;
  /** Settles a payment (`exact`: an authorization). Absent as for `check`. */
  settle?(request: FacilitatorSchemeRequest): Promise<Settled>;
  /**
   * Mounts the part's routes on the facilitator's app (a Hono app), after the core routes and before
   * the modules'. The per-client rate limit and the body limit already apply.
   */
  routes?(app: Hono): void;
  /** Starts the part's background work; run in list order after the outbox has started. */
  start?(): Promise<void>;
  /** Stops the part's background work (claim batching, watchers); run in reverse list order. */
  close?(): Promise<void>;
};

/**
 * The facilitator side of a scheme, registered by the facilitator from its own list
 * (`src/facilitator/facilitatorSchemes.ts`, or `createFacilitator({ schemes: [...] })`), never loaded
 * by a gate or a client. `Context` is what the facilitator hands its parts (store, chain clients,
 * transaction outbox, and the parts built before this one); the facilitator defines it.
 */
export type FacilitatorScheme<Context = unknown, Settled = unknown> = {
  readonly id: SchemeId;
  create(context: Context): FacilitatorSchemeInstance<Settled>;
};
