/**
 * The 402 a gate answers with (docs/protocol.md, "402 body"; docs/x402.md): Tollgate's JSON body with one freshly memoed
 * option per pricing entry — one-time prices and subscription plans with their terms — plus the x402
 * v2 `PAYMENT-REQUIRED` header so that a standard x402 client can pay the `exact` options.
 */
import type { Address } from "viem";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { type GateErrorCode, TollgateError } from "../protocol/errors.ts";
import { encodeJsonHeader, HeaderName } from "../protocol/header.ts";
import { memoQueryHash } from "../protocol/memo.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import { X402_VERSION, type X402PaymentRequired } from "../protocol/x402.ts";
import type { SchemeOfferEntry } from "../schemes/types.ts";
import { gateSchemes, type ResolvedOffer } from "./gateSchemes.ts";
import { issueMemo, type MemoSecret } from "./memo.ts";

/**
 * An offer whose terms the caller resolved: a one-time price (`{ scheme: "exact", amount }`) or a plan
 * with its terms (`{ scheme: "subscription", planId, amount, interval, manager, overage? }`), each
 * described by its scheme's gate part (`entryOf`).
 */
export type Offer = ResolvedOffer;

export type PaymentRequiredParams = {
  error: GateErrorCode;
  /** For people: why payment is required or why the proof was refused. */
  message: string;
  /** What the memo binds: upper-case method, the normalized path without query, and the query. */
  method: string;
  path: string;
  /** The query without `?`, as sent (`""` or absent for none); the memo binds its hash (`q`). */
  query?: string | undefined;
  /**
   * URL of the resource, for x402's `resource.url` and each option's `resource`: absolute on the
   * gate's configured public origin, or the path alone when there is none (never built from `Host`).
   */
  resourceUrl: string;
  description?: string | undefined;
  /** Media type of the paid response, for x402's `resource.mimeType` (default `application/json`). */
  mimeType?: string | undefined;
  /** One option per offer, in this order. Subscription offers are Tollgate-only (not in the x402 header). */
  offers: readonly Offer[];
  payTo: Address;
  network: Network;
  token: Address;
  /** The token's EIP-712 name and version, which x402 clients sign with; no x402 header without it. */
  tokenEip712?: { name: string; version: string } | undefined;
  /** Base URL of the facilitator that settles for this gate. */
  facilitator: string;
  memoSecret: MemoSecret;
  /** How long the offer stands: each memo expires this many seconds from now. */
  memoTtlSeconds: number;
  clock: Clock;
  random: (bytes: number) => Uint8Array;
};

export type BuiltPaymentRequired = {
  body: PaymentRequired;
  /** The x402 v2 object of the `PAYMENT-REQUIRED` header, when the token's EIP-712 domain is known. */
  x402: X402PaymentRequired | undefined;
  /** Headers of the 402: content type, `Cache-Control: no-store`, and `PAYMENT-REQUIRED`. */
  headers: Record<string, string>;
};

/**
 * Composes the 402 for one request from resolved offers (the gate's own builder; the specification's
 * `buildPaymentRequired({ plan })` reads the offers from a configured gate). Every call issues new memos (96 random bits each), so the body is
 * never reused and `Cache-Control: no-store` keeps intermediaries from serving it twice.
 *
 * @example
 * const built = composePaymentRequired({ error: "PaymentRequired", message: "pay to read", method: "GET",
 *   path: "/report", resourceUrl: "https://api.example.com/report", offers: [{ scheme: "exact", amount: 500_000n }],
 *   payTo, network: "eip155:8453", token: usdc, tokenEip712: { name: "USD Coin", version: "2" },
 *   facilitator: "https://facilitator.example.com", memoSecret, memoTtlSeconds: 300, clock, random: randomBytes });
 * return paymentRequiredResponse(built);
 */
export function composePaymentRequired(params: PaymentRequiredParams): BuiltPaymentRequired {
  const { offers, ...rest } = params;
  return composePaymentRequiredFromEntries({ ...rest, entries: offers.map(entryOfOffer) });
}

/** `composePaymentRequired` over entries the schemes' gate parts described (`SchemeOfferEntry`). */
export type EntriesPaymentRequiredParams = Omit<PaymentRequiredParams, "offers"> & {
  entries: readonly SchemeOfferEntry[];
};

/**
 * Composes the 402 from the schemes' entries, in order: each gets the gate's network, token and payee,
 * a fresh memo binding its amount, the facilitator's URL, and — when the 402 also sells a plan — the
 * first plan's id with `subscriptionScheme: true` (§2.1). Entries marked `x402` also go into the x402
 * `PAYMENT-REQUIRED` header.
 */
export function composePaymentRequiredFromEntries(
  params: EntriesPaymentRequiredParams,
): BuiltPaymentRequired {
  const expiresAt = unixSeconds(params.clock) + params.memoTtlSeconds;
  const firstPlan = params.entries.find(
    (entry) => entry.tollgate?.planId !== undefined && entry.tollgate.interval !== undefined,
  )?.tollgate?.planId;
  const q = memoQueryHash(params.query ?? "");
  const x402Options: PaymentOption[] = [];
  const accepts: PaymentOption[] = params.entries.map((entry) => {
    const amount = entry.amount.toString();
    const memo = issueMemo(
      params.memoSecret,
      {
        m: params.method,
        p: params.path,
        ...(q === undefined ? {} : { q }),
        a: amount,
        t: params.payTo,
        n: params.network,
        k: params.token,
        e: expiresAt,
      },
      params.random,
    );
    const isPlan = entry.tollgate?.planId !== undefined && entry.tollgate.interval !== undefined;
    const option: PaymentOption = {
      scheme: entry.scheme,
      network: params.network,
      token: params.token,
      amount,
      payTo: params.payTo,
      memo,
      tollgate: isPlan
        ? { ...entry.tollgate, subscriptionScheme: true, facilitator: params.facilitator }
        : {
            ...(firstPlan === undefined ? {} : { planId: firstPlan }),
            ...entry.tollgate,
            subscriptionScheme: firstPlan !== undefined,
            facilitator: params.facilitator,
          },
      ...(entry.extra === undefined ? {} : { extra: entry.extra }),
      resource: params.resourceUrl,
      ...(params.description === undefined ? {} : { description: params.description }),
    };
    if (entry.x402 === true) x402Options.push(option);
    return option;
  });
  const body: PaymentRequired = { version: "1", error: params.error, message: params.message, accepts };

  const headers: Record<string, string> = {
    "content-type": "application/json",
    "cache-control": "no-store",
  };
  let x402: X402PaymentRequired | undefined;
  if (params.tokenEip712 !== undefined && x402Options.length > 0) {
    const extra = { name: params.tokenEip712.name, version: params.tokenEip712.version };
    x402 = {
      x402Version: X402_VERSION,
      error: params.message,
      resource: {
        url: params.resourceUrl,
        description: params.description ?? "",
        mimeType: params.mimeType ?? "application/json",
      },
      accepts: x402Options.map((option) => ({
        scheme: "exact",
        network: option.network,
        amount: option.amount,
        asset: option.token,
        payTo: option.payTo,
        maxTimeoutSeconds: params.memoTtlSeconds,
        extra,
      })),
    };
    try {
      headers[HeaderName.X402PaymentRequired] = encodeJsonHeader(x402);
    } catch {
      // Over 8 KiB (a very long resource URL): x402 clients cannot be served; Tollgate clients still can.
      x402 = undefined;
    }
  }
  return { body, x402, headers };
}

/** Each built-in gate part that describes resolved offers, by scheme id. */
const entryOfScheme: ReadonlyMap<string, (offer: Offer) => SchemeOfferEntry> = new Map(
  gateSchemes.flatMap((scheme) =>
    scheme.gate?.entryOf === undefined ? [] : [[scheme.id, scheme.gate.entryOf] as const],
  ),
);

/** An offer of the resolved form as a scheme entry, as its scheme's gate part describes it. */
function entryOfOffer(offer: Offer): SchemeOfferEntry {
  const entryOf = entryOfScheme.get(offer.scheme);
  if (entryOf === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `composePaymentRequired: no built-in scheme describes offers of "${offer.scheme}"`,
    );
  }
  return entryOf(offer);
}

/** The built 402 as a web `Response`. */
export function paymentRequiredResponse(built: BuiltPaymentRequired): Response {
  return new Response(JSON.stringify(built.body), { status: 402, headers: built.headers });
}
