/**
 * `fetchWithPayment` (docs/client.md): a `fetch` that answers a 402 by paying and retrying.
 *
 * Flow: send the request; on a 402, read the offer, choose an option within the price ceiling, pay it
 * through the payer, and send the request again with `X-PAYMENT`. If the gate refuses the proof
 * (402 `InvalidPaymentProof`), the fresh 402 it answered with is paid and retried, at most
 * `maxProofRetries` times. Each payment is bounded by `maxPrice`, so the most one call can spend is
 * `maxPrice × (1 + maxProofRetries)`.
 *
 * A paid request answered 5xx is re-sent with the same proof, at most `maxServerErrorRetries` times:
 * the gate hands a proof back when its handler fails, so a transient failure costs one payment. If it
 * keeps failing, `PaidRequestFailed` carries the proof, which stays redeemable until it expires; a
 * fresh 402 is never paid after a 5xx, so a failing seller is paid at most once per call.
 *
 * The request body is buffered once, so the retry sends the same bytes (a stream cannot be replayed).
 *
 * Subscriptions: the default chooser subscribes to a plan the gate flags with `subscriptionScheme`
 * (§2.1) only when the caller allowed it (`subscription.maxPrice`); otherwise it pays once. A
 * subscription held for the origin that the gate refuses as not active (paused, past due, renewal
 * overdue) is never replaced by one-time payments unless the caller allowed that
 * (`onSubscriptionInactive: "pay-once"`, or a custom `choose` handed the refusal).
 */
import type { Address } from "viem";
import {
  type FacilitatorClient,
  type FetchFn,
  parseRetryAfter,
  sameFacilitatorUrl,
} from "../http/facilitatorClient.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { type GateErrorCode, TollgateError } from "../protocol/errors.ts";
import { HeaderName } from "../protocol/header.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import { builtinSchemes } from "../schemes/builtinSchemes.ts";
import { exactScheme } from "../schemes/exact/index.ts";
import { createSchemeRegistry } from "../schemes/registry.ts";
import type { SubscribeToPlanOptions } from "../schemes/subscription/client/subscribeToPlan.ts";
import {
  inactiveStateOf,
  SubscriptionNotActiveError,
} from "../schemes/subscription/client/subscriptionNotActiveError.ts";
import { subscriptionScheme } from "../schemes/subscription/index.ts";
import type { ClientPayment, ClientSchemePart, Scheme, SchemeId, SchemePayer } from "../schemes/types.ts";
import { createPayX402 } from "../schemes/x402Exact/client/payX402.ts";
import { parseTokenAmount, type TokenAmountInput } from "./parseTokenAmount.ts";
import { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
import {
  affordableOptions,
  type CallPayers,
  noAffordableOption,
  oneTimePayers,
  subscribableOptions,
} from "./payableOptions.ts";
import type {
  OriginSubscription,
  PayerSigner,
  PayerSubscriptions,
  PaymentReceipt,
  PayOptions,
  PayX402,
} from "./payerTypes.ts";
import { readPaymentRequired } from "./readPaymentRequired.ts";

/** What a paying scheme is told of a request that got no answer (refused, cut, timed out). */
const NO_ANSWER = () => new Response(null, { status: 503 });

export type ChooseContext = {
  request: Request;
  paymentRequired: PaymentRequired;
  /** The ceiling in smallest units. */
  maxPrice: bigint;
  /** Options the payer can pay (scheme, network and facilitator match) within the ceiling, cheapest first. */
  affordable: PaymentOption[];
  /**
   * Set when the gate refused the subscription this request carried (`SubscriptionNotActive`,
   * `AllowanceExhausted`, `SubscriptionAuthInvalid`): return an `exact` option to pay once instead, or
   * anything else to have the refusal thrown as a `TollgateError` with its code.
   */
  refusal?: { error: GateErrorCode; message: string; subscriptionId: bigint };
};

/** What `fetchWithPayment` needs of a payer: paying one option once, and optionally subscribing. */
export type FetchPayer = {
  readonly address: Address;
  readonly network: Network;
  readonly facilitator: FacilitatorClient;
  readonly account?: PayerSigner;
  pay(option: PaymentOption, options: PayOptions): Promise<PaymentReceipt>;
  subscribe?: (options: SubscribeToPlanOptions) => Promise<bigint>;
  subscriptionHeaders?: (
    subscriptionId: bigint | string,
    audienceOrigin: string,
  ) => Promise<Record<string, string>>;
  readonly subscriptions?: PayerSubscriptions;
};

/** A subscription `fetchWithPayment` took out or started using for a request. */
export type SubscriptionUse = {
  planId: string;
  subscriptionId: bigint;
  /** True when this call subscribed (the first period was charged); false for one already held. */
  created: boolean;
  option: PaymentOption;
};

/**
 * Picks the option to pay from a 402, or `undefined` to decline (the 402 is then returned to the
 * caller). May throw to refuse with a reason (e.g. `BudgetExceeded`). The default takes the cheapest
 * affordable option.
 */
export type ChoosePaymentOption = (
  options: PaymentOption[],
  context: ChooseContext,
) => PaymentOption | undefined | Promise<PaymentOption | undefined>;

export type FetchWithPaymentOptions = {
  /** The most one payment may cost: a bigint of smallest units or USDC text (`"0.50"`). Required. */
  maxPrice: bigint | string;
  choose?: ChoosePaymentOption;
  /** Fresh 402s paid after the gate refused a proof (default 2). */
  maxProofRetries?: number;
  /** Times the same proof is re-sent after the paid request is answered 5xx (default 2, at most 10). */
  maxServerErrorRetries?: number;
  /**
   * Wait before re-sending after a 5xx without `Retry-After` (default 500 ms). A gate sharing its
   * replay guard may hand the proof back a moment after its 5xx leaves, so an immediate re-send could
   * be refused.
   */
  serverErrorRetryDelayMs?: number;
  /** The longest wait honoured (`Retry-After` included); a longer one ends the call (default 10 s). */
  maxServerErrorRetryDelayMs?: number;
  /** Waits between re-sends; default `setTimeout`. */
  sleep?: (ms: number) => Promise<void>;
  /** Tells whether a proof would expire before a re-send; default the system clock. */
  clock?: Clock;
  /**
   * Pays a 402 that carries only x402's `PAYMENT-REQUIRED`. Default: `createPayX402(payer)` (the payer's
   * account signs an EIP-3009 `exact` payment) — unless `choose` is given: a caller that chooses (a
   * budget policy) must also pass `payX402`, so that no x402 spend bypasses it.
   */
  payX402?: PayX402;
  /** Told of each settled payment (for ledgers and logs). */
  onPayment?: (receipt: PaymentReceipt, request: Request) => void;
  /**
   * Subscribing. `maxPrice` (a bigint of smallest units or USDC text) allows the default chooser to
   * subscribe to a plan the gate flags with `subscriptionScheme: true`, priced at most that per
   * period, instead of paying once; without it the default chooser only pays once. `maxOverage`
   * (default 0: included units only) and `approval` (default 12 periods) are the terms of
   * subscriptions taken out, by the default chooser or when a custom `choose` picks a plan: token
   * units as a number or text (`2`, `"2.50"`), or a bigint of smallest units.
   */
  subscription?: {
    maxPrice?: bigint | string | undefined;
    maxOverage?: TokenAmountInput | undefined;
    approval?: TokenAmountInput | undefined;
  };
  /**
   * What to do when the gate refuses the subscription held for its origin as not active (paused,
   * past due, renewal overdue): `"error"` throws `SubscriptionNotActiveError` (the default chooser's
   * default); `"pay-once"` pays that call once instead (within `maxPrice`, through `choose` when one is
   * given) and keeps the subscription for later calls. With a custom `choose` and no setting, `choose`
   * decides from `context.refusal`.
   */
  onSubscriptionInactive?: "error" | "pay-once";
  /** Told when a request starts using a subscription (and whether it was just taken out). */
  onSubscribe?: (use: SubscriptionUse, request: Request) => void;
  /**
   * Payment schemes besides the built-in ones (`src/schemes`, docs/schemes.md): their client parts
   * pay options of their scheme (compared with `exact` options by the price of one call) and may send
   * a credential up front. Built-in ids cannot be replaced.
   */
  schemes?: readonly Scheme[];
  /** Told of each payment made by a scheme other than `exact` (whose payments go to `onPayment`). */
  onSchemePayment?: (payment: ClientPayment & { scheme: SchemeId }, request: Request) => void;
};

/** 402 errors that refuse the subscription a request carried. */
const SUBSCRIPTION_REFUSALS: ReadonlySet<string> = new Set([
  "SubscriptionNotActive",
  "AllowanceExhausted",
  "SubscriptionAuthInvalid",
]);

/**
 * Wraps `fetch` so that 402s are paid.
 *
 * Throws `TollgateError`: `PriceCeilingExceeded` when every option costs more than `maxPrice`,
 * `UnsupportedNetwork` when no option is payable by this payer, `InvalidPaymentProof` when the gate
 * still refuses after the retries, `PaidRequestFailed` when a paid request keeps being answered 5xx
 * (`details`: `paid`, `amount`, `transaction`, `status`, `body`, and the `proof` header, redeemable
 * until `redeemableUntil`, unix seconds), and the payer's or facilitator's errors (`InsufficientFunds`, …).
 *
 * @example
 * const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "0.50" });
 * const response = await paidFetch("https://api.example.com/reports/1");
 */
export function fetchWithPayment(
  fetch: FetchFn,
  payer: FetchPayer,
  options: FetchWithPaymentOptions,
): FetchFn {
  if (typeof fetch !== "function") {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment(fetch, payer, options): fetch must be a function",
    );
  }
  if (
    typeof payer !== "object" ||
    payer === null ||
    typeof payer.pay !== "function" ||
    typeof payer.network !== "string" ||
    typeof payer.facilitator?.url !== "string"
  ) {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment(fetch, payer, options): payer is what createPayer returns",
    );
  }
  if (typeof options !== "object" || options === null) {
    throw new TollgateError(
      "InvalidRequest",
      'fetchWithPayment(fetch, payer, options): options need maxPrice, e.g. { maxPrice: "0.50" }',
    );
  }
  const maxPrice = parseUsdcCeiling(options.maxPrice);
  const terms = options.subscription;
  if (terms !== undefined && (typeof terms !== "object" || terms === null)) {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment: subscription is { maxPrice?, maxOverage?, approval? }",
    );
  }
  // Checked now so a mistake surfaces at construction, not at the first 402; read again at use,
  // since a caller's `choose` may set the terms for the plan it picks.
  if (terms?.maxOverage !== undefined) parseTokenAmount(terms.maxOverage, "subscription.maxOverage");
  if (terms?.approval !== undefined) parseTokenAmount(terms.approval, "subscription.approval");
  const subscriptionMaxPrice = terms?.maxPrice === undefined ? undefined : parseUsdcCeiling(terms.maxPrice);
  const onInactive = options.onSubscriptionInactive;
  if (onInactive !== undefined && onInactive !== "error" && onInactive !== "pay-once") {
    throw new TollgateError(
      "InvalidRequest",
      'fetchWithPayment: onSubscriptionInactive is "error" or "pay-once"',
    );
  }
  // Looked up once: which parts pay per call, and which send a credential before any 402.
  const registry = createSchemeRegistry(builtinSchemes, options.schemes ?? []);
  // A payer carrying a channel wallet (`withChannelWallet`) pays `channel` options too.
  const payers: CallPayers =
    (options.schemes === undefined || options.schemes.length === 0) &&
    (payer as { channels?: unknown }).channels === undefined
      ? oneTimePayers
      : (scheme) => registry.client(scheme);
  const upFrontParts = registry.schemes.flatMap((scheme) =>
    scheme.client?.upFront === undefined
      ? []
      : [scheme.client as Required<Pick<ClientSchemePart, "upFront">> & ClientSchemePart],
  );
  const maxProofRetries = options.maxProofRetries ?? 2;
  if (!Number.isSafeInteger(maxProofRetries) || maxProofRetries < 0 || maxProofRetries > 10) {
    throw new TollgateError("InvalidRequest", "fetchWithPayment: maxProofRetries must be an integer 0..10");
  }
  const maxServerErrorRetries = options.maxServerErrorRetries ?? 2;
  if (
    !Number.isSafeInteger(maxServerErrorRetries) ||
    maxServerErrorRetries < 0 ||
    maxServerErrorRetries > 10
  ) {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment: maxServerErrorRetries must be an integer 0..10",
    );
  }
  const retryDelayMs = delayOption(options.serverErrorRetryDelayMs, 500, "serverErrorRetryDelayMs");
  const maxRetryDelayMs = delayOption(
    options.maxServerErrorRetryDelayMs,
    10_000,
    "maxServerErrorRetryDelayMs",
  );
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const clock = options.clock ?? systemClock;
  if (options.choose !== undefined && typeof options.choose !== "function") {
    throw new TollgateError("InvalidRequest", "fetchWithPayment: choose must be a function");
  }
  const canSubscribe =
    subscriptionMaxPrice !== undefined &&
    payer.subscribe !== undefined &&
    payer.subscriptions !== undefined &&
    payer.subscriptionHeaders !== undefined;
  /**
   * The default chooser. §2.1: `subscriptionScheme: true` tells clients the gate prefers subscribers,
   * so with the caller's leave (`subscription.maxPrice`) it takes the cheapest flagged plan within that
   * price per period; otherwise, or with no such plan, the cheapest option payable once.
   */
  const defaultChoose: ChoosePaymentOption = (offered, context) => {
    if (canSubscribe && context.refusal === undefined) {
      const plan = subscribableOptions(offered, payer, subscriptionMaxPrice)[0];
      if (plan !== undefined) return plan;
    }
    return context.affordable[0];
  };
  const choose = options.choose ?? defaultChoose;
  const payX402 =
    options.payX402 ??
    (options.choose === undefined && payer.account !== undefined
      ? createPayX402({ network: payer.network, account: payer.account, facilitator: payer.facilitator })
      : undefined);

  return async function fetchWithPayment(input, init) {
    const original = new Request(input, init);
    // Buffer once: the paid retry must resend exactly the same body.
    const body = original.body === null ? undefined : await original.arrayBuffer();
    const send = (extra?: Record<string, string>) => {
      const headers = new Headers(original.headers);
      for (const [name, value] of Object.entries(extra ?? {})) headers.set(name, value);
      return fetch(
        new Request(original.url, {
          method: original.method,
          headers,
          body: body ?? null,
          signal: original.signal,
          redirect: original.redirect,
          credentials: original.credentials,
          cache: original.cache,
          integrity: original.integrity,
          keepalive: original.keepalive,
          mode: original.mode,
          referrer: original.referrer,
          referrerPolicy: original.referrerPolicy,
        }),
      );
    };

    // A subscription this payer uses at this origin goes up front, so a subscribed call costs no 402.
    const origin = new URL(original.url).origin;
    let subscription: OriginSubscription | undefined = payer.subscriptions?.forOrigin(origin);
    let subscriptionHeaders = subscription === undefined ? undefined : await headersFor(payer, subscription);
    // Otherwise a scheme that pays ahead on a known route (an open channel) may: one HTTP exchange.
    let upFront: Record<string, string> | undefined;
    let upFrontPart: ClientSchemePart | undefined;
    if (subscriptionHeaders === undefined) {
      for (const part of upFrontParts) {
        upFront = await part.upFront(original, payer as SchemePayer);
        upFrontPart = part;
        if (upFront !== undefined) break;
      }
    }
    let audienceRetried = false;

    /**
     * The error for a subscription the gate says is not active, with its state read from the chain.
     * A cancelled or unknown subscription can never serve again: it is forgotten, so the next call
     * meets the gate's terms afresh. A paused or overdue one stays bound: resuming or renewing it is
     * enough to be served again, and until then every call says why instead of paying.
     */
    const notActive = async (subscriptionId: bigint, message: string) => {
      const state = await inactiveStateOf(payer.facilitator, subscriptionId, original.signal);
      if (state === "Cancelled" || state === "NotFound") payer.subscriptions?.forget(subscriptionId);
      return new SubscriptionNotActiveError({ subscriptionId, state, url: original.url, message });
    };
    let subscribed = false;
    let attempt = 0;

    const payOnce = async (chosen: PaymentOption) => {
      const receipt = await payer.pay(chosen, {
        maxAmount: maxPrice,
        ...(original.signal ? { signal: original.signal } : {}),
      });
      options.onPayment?.(receipt, original);
      attempt++;
      const response = await send({ [HeaderName.Payment]: receipt.header });
      return response.status >= 500 ? resendProof(receipt, response) : response;
    };

    /** Pays `chosen` with its scheme's client part and sends the request with its credential. */
    const payWithScheme = async (chosen: PaymentOption) => {
      const part = payers(chosen.scheme);
      if (part?.pay === undefined) {
        throw new TollgateError("InvalidRequest", `no registered scheme pays "${chosen.scheme}" options`, {
          details: { scheme: chosen.scheme },
        });
      }
      const payment = await part.pay(chosen, {
        payer: payer as SchemePayer,
        maxAmount: maxPrice,
        request: original,
        signal: original.signal,
        clock,
      });
      options.onSchemePayment?.({ ...payment, scheme: chosen.scheme }, original);
      attempt++;
      let paid: Response;
      try {
        paid = await send(payment.headers);
      } catch (error) {
        // No answer: booked as a 5xx (a channel takes the request's price back; channelFetch.ts).
        await part.settled?.(payment, NO_ANSWER());
        throw error;
      }
      await part.settled?.(payment, paid);
      return paid;
    };

    /**
     * The paid request was answered 5xx: the gate gave the proof back (or never took it, for a fault
     * of its own), so the same proof is re-sent. Never pays again: a 402 to a re-sent proof ends the
     * call too, since it would mean paying a seller that just failed a second time.
     */
    const resendProof = async (receipt: PaymentReceipt, failed: Response): Promise<Response> => {
      const header = receipt.header;
      let response = failed;
      let sends = 1;
      let refused: string | undefined;
      // Read once per 5xx: the last one's body goes into the error, whatever ends the loop.
      let body = (await response.text()).slice(0, 2_000);
      for (;;) {
        const retryAfter = parseRetryAfter(response.headers.get(HeaderName.RetryAfter));
        const delay = retryAfter === undefined ? retryDelayMs : retryAfter * 1000;
        if (
          sends > maxServerErrorRetries ||
          delay > maxRetryDelayMs ||
          clock.now() + delay >= receipt.proof.exp * 1000
        ) {
          break;
        }
        await sleep(delay);
        const next = await send({ [HeaderName.Payment]: header });
        sends++;
        if (next.status < 500 && next.status !== 402) return next;
        if (next.status === 402) {
          const offer = await readPaymentRequired(next);
          refused = offer?.kind === "tollgate" ? offer.body.message : "402 to the same proof";
          break;
        }
        response = next;
        body = (await response.text()).slice(0, 2_000);
      }
      const until = new Date(receipt.proof.exp * 1000).toISOString();
      const tries = `${sends} ${sends === 1 ? "try" : "tries"}`;
      throw new TollgateError(
        "PaidRequestFailed",
        refused === undefined
          ? `${original.method} ${original.url} answered ${response.status} after being paid (${tries}); the proof stays redeemable until ${until}`
          : `${original.method} ${original.url} answered ${response.status} after being paid, and the gate refused the same proof when re-sent (${refused}): it did not give the payment back`,
        {
          details: {
            url: original.url,
            status: response.status,
            body,
            sends,
            paid: true,
            amount: receipt.proof.amount,
            payer: receipt.proof.payer,
            payTo: receipt.proof.payTo,
            transaction: receipt.proof.tx,
            proof: header,
            ...(refused === undefined ? { redeemableUntil: receipt.proof.exp } : { refused }),
          },
        },
      );
    };

    // The part that paid ahead books the answer (a channel takes a refused request's price back), and
    // a request that got no answer as a 5xx: it may never have reached the gate.
    const paidAhead = subscriptionHeaders === undefined && upFront !== undefined;
    let response: Response;
    try {
      response = await send(subscriptionHeaders ?? upFront);
    } catch (error) {
      if (paidAhead) await upFrontPart?.settled?.({ headers: upFront!, amount: 0n }, NO_ANSWER());
      throw error;
    }
    if (paidAhead) await upFrontPart?.settled?.({ headers: upFront!, amount: 0n }, response);
    for (;;) {
      if (response.status !== 402) return response;
      const offer = await readPaymentRequired(response.clone());
      if (offer === undefined) return response;

      if (subscription !== undefined && subscriptionHeaders !== undefined && offer.kind === "tollgate") {
        const { error, message } = offer.body;
        const audience = audienceOf(offer.body.accepts, origin);
        if (error === "SubscriptionAuthInvalid" && !audienceRetried && audience !== subscription.audience) {
          // The gate names its public origin in its 402 (behind a proxy it differs from ours): sign for it.
          audienceRetried = true;
          subscription = { ...subscription, audience };
          payer.subscriptions?.remember({ ...subscription, origin });
          subscriptionHeaders = await headersFor(payer, subscription);
          response = await send(subscriptionHeaders);
          continue;
        }
        if (SUBSCRIPTION_REFUSALS.has(error)) {
          const { subscriptionId } = subscription;
          const refusal = { error, message, subscriptionId };
          const inactive = error === "SubscriptionNotActive";
          const affordable = affordableOptions(offer.body.accepts, payer, maxPrice);
          let fallback: PaymentOption | undefined;
          if (inactive && onInactive === "error") {
            fallback = undefined;
          } else if (options.choose !== undefined) {
            fallback = await options.choose(offer.body.accepts, {
              request: original,
              paymentRequired: offer.body,
              maxPrice,
              affordable,
              refusal,
            });
          } else if (inactive && onInactive === "pay-once") {
            fallback = affordable[0];
            if (fallback === undefined) throw noAffordableOption(offer.body.accepts, payer, maxPrice);
          }
          if (fallback?.scheme !== "exact") {
            if (inactive) throw await notActive(subscriptionId, message);
            throw new TollgateError(error, `the gate refused subscription ${subscriptionId}: ${message}`, {
              details: { url: original.url, subscriptionId: subscriptionId.toString() },
            });
          }
          // Paying once for this call only: the subscription stays bound to the origin, so the calls
          // after it are served by it again as soon as it is active (resumed, renewed).
          subscription = undefined;
          subscriptionHeaders = undefined;
          response = await payOnce(fallback);
          continue;
        }
        // Anything else (the subscription does not cover this resource): pay or subscribe as usual.
        subscription = undefined;
        subscriptionHeaders = undefined;
      }

      if (
        attempt > 0 &&
        (offer.kind !== "tollgate" || offer.body.error !== "InvalidPaymentProof" || attempt > maxProofRetries)
      ) {
        const refusal = offer.kind === "tollgate" ? offer.body : undefined;
        throw new TollgateError(
          refusal?.error === undefined || refusal.error === "PaymentRequired"
            ? "InvalidPaymentProof"
            : refusal.error,
          `the gate refused the payment: ${refusal?.message ?? "402 after paying"}`,
          { details: { url: original.url, attempts: attempt } },
        );
      }

      if (offer.kind === "x402") {
        if (payX402 === undefined) {
          throw new TollgateError(
            "InvalidRequest",
            "this server takes only x402 PAYMENT-SIGNATURE payments: pass payX402 (with a custom choose, or a payer without an account)",
            {
              details: { url: original.url },
            },
          );
        }
        const header = await payX402(offer.paymentRequired, { request: original, maxPrice });
        if (header === undefined) return response;
        return send({ [header.name]: header.value });
      }

      const chosen = await choose(offer.body.accepts, {
        request: original,
        paymentRequired: offer.body,
        maxPrice,
        affordable: affordableOptions(offer.body.accepts, payer, maxPrice, payers),
      });
      if (chosen === undefined) {
        if (options.choose === undefined) {
          throw noAffordableOption(offer.body.accepts, payer, maxPrice, payers);
        }
        return response;
      }
      if (chosen.scheme === exactScheme.id) {
        response = await payOnce(chosen);
        continue;
      }
      if (chosen.scheme !== subscriptionScheme.id) {
        response = await payWithScheme(chosen);
        continue;
      }
      if (subscribed) {
        // Subscribed (or sent a held subscription) already in this call and the gate still asks: stop.
        throw new TollgateError(
          offer.body.error,
          `the gate did not accept the subscription: ${offer.body.message}`,
          { details: { url: original.url } },
        );
      }
      subscribed = true;
      const use = await useSubscription(payer, chosen, options.subscription, subscriptionMaxPrice);
      options.onSubscribe?.(use, original);
      subscription = {
        subscriptionId: use.subscriptionId,
        planId: use.planId,
        audience: audienceOf([chosen], origin),
      };
      payer.subscriptions?.remember({ ...subscription, origin });
      subscriptionHeaders = await headersFor(payer, subscription);
      response = await send(subscriptionHeaders);
    }
  };
}

function delayOption(value: number | undefined, fallback: number, name: string): number {
  const ms = value ?? fallback;
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new TollgateError("InvalidRequest", `fetchWithPayment: ${name} must be a whole number of ms`);
  }
  return ms;
}

/** `X-Tollgate-Sub` and a sub-auth token for the gate's audience. */
function headersFor(payer: FetchPayer, subscription: OriginSubscription): Promise<Record<string, string>> {
  if (payer.subscriptionHeaders === undefined) {
    throw new TollgateError("InvalidRequest", "this payer cannot sign sub-auth tokens");
  }
  return payer.subscriptionHeaders(subscription.subscriptionId, subscription.audience);
}

/** The origin a gate expects in tokens: that of the `resource` URL its options name, else ours. */
function audienceOf(accepts: readonly PaymentOption[], fallback: string): string {
  for (const option of accepts) {
    if (option.resource === undefined) continue;
    try {
      return new URL(option.resource).origin;
    } catch {
      // A relative resource: the gate is at the origin we asked.
    }
  }
  return fallback;
}

/** The subscription for a chosen `subscription` option: one already held for its plan, or a new one. */
async function useSubscription(
  payer: FetchPayer,
  option: PaymentOption,
  terms: FetchWithPaymentOptions["subscription"],
  maxPrice: bigint | undefined,
): Promise<SubscriptionUse> {
  const planId = option.tollgate?.planId;
  if (planId === undefined || option.tollgate?.manager === undefined) {
    throw new TollgateError("InvalidRequest", "the chosen subscription option names no plan");
  }
  if (option.network !== payer.network) {
    throw new TollgateError(
      "UnsupportedNetwork",
      `the plan is on ${option.network}; this payer pays on ${payer.network}`,
    );
  }
  const facilitator = option.tollgate.facilitator;
  if (!sameFacilitatorUrl(facilitator, payer.facilitator.url)) {
    throw new TollgateError(
      "InvalidRequest",
      "the gate's plan is run through another facilitator than this payer's",
      {
        details: { facilitator, payerFacilitator: payer.facilitator.url },
      },
    );
  }
  const { subscribe, subscriptions } = payer;
  if (subscribe === undefined || subscriptions === undefined) {
    throw new TollgateError("InvalidRequest", "this payer cannot subscribe");
  }
  const { subscriptionId, created } = await subscriptions.ensure(planId, () =>
    subscribe({
      planId,
      ...(terms?.maxOverage === undefined ? {} : { maxOverage: terms.maxOverage }),
      ...(terms?.approval === undefined ? {} : { approval: terms.approval }),
      // The plan's price is read again from the facilitator before signing: a gate's 402 cannot
      // make a dearer plan pass for one within the caller's price.
      ...(maxPrice === undefined ? {} : { maxPrice }),
      offer: { payTo: option.payTo, token: option.token, amount: option.amount },
    }),
  );
  return { planId, subscriptionId, created, option };
}
