/**
 * The subscription scheme's part in `fetchWithPayment` (docs/client.md): a subscription held for the
 * origin goes up front, so a subscribed call costs no 402; a plan the gate flags with
 * `subscriptionScheme` (docs/protocol.md, "402 body") is taken out when the caller allowed it
 * (`subscription.maxPrice`) or its `choose` picked it; and a refusal of the subscription a request
 * carried is answered here.
 *
 * Invariants:
 * - A subscription held for the origin that the gate refuses as not active (paused, past due, renewal
 *   overdue) is never replaced by one-time payments unless the caller allowed that
 *   (`onSubscriptionInactive: "pay-once"`, or a custom `choose` handed the refusal); paying once then
 *   keeps the subscription bound to the origin for the calls after it.
 * - A plan's price is read again from the facilitator before subscribing: a gate's 402 cannot make a
 *   dearer plan pass for one within the caller's price.
 * - One request subscribes at most once: a gate that still asks after that ends the call.
 */

import type { FetchWithPaymentOptions, SubscriptionUse } from "../../../client/fetchOptions.ts";
import { parseTokenAmount } from "../../../client/parseTokenAmount.ts";
import { parseUsdcCeiling } from "../../../client/parseUsdcCeiling.ts";
import { cheapestFirst, facilitatorMismatch } from "../../../client/payableOptions.ts";
import type { OriginSubscription } from "../../../client/payerTypes.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { PaymentOption, PaymentRequired } from "../../../protocol/paymentRequired.ts";
import type {
  ClientFlowContext,
  ClientFlowRequest,
  ClientFlows,
  ClientRefusalOutcome,
  ClientSession,
  SchemePayer,
} from "../../types.ts";
import { isSubscribableOption, planCallPrice } from "./planOptions.ts";
import { inactiveStateOf, SubscriptionNotActiveError } from "./subscriptionNotActiveError.ts";
import type { SubscribingPayer } from "./subscriptionPayer.ts";

/** 402 errors that refuse the subscription a request carried. */
const SUBSCRIPTION_REFUSALS: ReadonlySet<string> = new Set([
  "SubscriptionNotActive",
  "AllowanceExhausted",
  "SubscriptionAuthInvalid",
]);

type Payer = SchemePayer & SubscribingPayer;

/** What the sessions of one `fetchWithPayment` share: its payer and its checked subscription options. */
type SubscriptionSettings = {
  payer: Payer;
  options: FetchWithPaymentOptions;
  /** The ceiling of one payment (a fallback paid once), smallest unit. */
  maxPrice: bigint;
  /** The most a plan taken out by the default chooser may cost per period; unset: it takes none. */
  planMaxPrice: bigint | undefined;
};

/** Checks the caller's subscription options once, at `fetchWithPayment`'s construction. */
export function createSubscriptionFlows(context: ClientFlowContext): ClientFlows {
  const options = context.options as FetchWithPaymentOptions;
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
  const planMaxPrice = terms?.maxPrice === undefined ? undefined : parseUsdcCeiling(terms.maxPrice);
  const onInactive = options.onSubscriptionInactive;
  if (onInactive !== undefined && onInactive !== "error" && onInactive !== "pay-once") {
    throw new TollgateError(
      "InvalidRequest",
      'fetchWithPayment: onSubscriptionInactive is "error" or "pay-once"',
    );
  }
  const payer = context.payer as Payer;
  const settings: SubscriptionSettings = { payer, options, maxPrice: context.maxPrice, planMaxPrice };
  const canSubscribe =
    payer.subscribe !== undefined &&
    payer.subscriptions !== undefined &&
    payer.subscriptionHeaders !== undefined;
  return {
    // The gate prefers subscribers to plans it flags: with the caller's leave, the cheapest such plan.
    prefer: (offered) =>
      planMaxPrice === undefined || !canSubscribe
        ? undefined
        : subscribableOptions(offered, payer, planMaxPrice)[0],
    session: (request) => new SubscriptionSession(settings, request),
  };
}

/** The subscription one request carries: held for its origin, or taken out on its 402. */
class SubscriptionSession implements ClientSession {
  private readonly origin: string;
  private subscription: OriginSubscription | undefined;
  private audienceRetried = false;
  private taken = false;

  constructor(
    private readonly settings: SubscriptionSettings,
    private readonly call: ClientFlowRequest,
  ) {
    this.origin = new URL(call.request.url).origin;
  }

  async upFront(): Promise<Record<string, string> | undefined> {
    this.subscription = this.settings.payer.subscriptions?.forOrigin(this.origin);
    return this.subscription === undefined ? undefined : this.headersFor(this.subscription);
  }

  async refused(body: PaymentRequired): Promise<ClientRefusalOutcome> {
    const subscription = this.subscription;
    if (subscription === undefined) return { kind: "pass" };
    const { error, message } = body;
    const audience = audienceOf(body.accepts, this.origin);
    if (error === "SubscriptionAuthInvalid" && !this.audienceRetried && audience !== subscription.audience) {
      // The gate names its public origin in its 402 (behind a proxy it differs from ours): sign for it.
      this.audienceRetried = true;
      this.bind({ ...subscription, audience });
      return { kind: "send", headers: await this.headersFor({ ...subscription, audience }) };
    }
    this.subscription = undefined;
    // Anything else (the subscription does not cover this resource): pay or subscribe as usual.
    if (!SUBSCRIPTION_REFUSALS.has(error)) return { kind: "pass" };
    const { subscriptionId } = subscription;
    const fallback = await this.fallback(body, { error, message, subscriptionId });
    if (fallback === undefined || !this.call.isOneTime(fallback)) {
      if (error === "SubscriptionNotActive") throw await this.notActive(subscriptionId, message);
      throw new TollgateError(error, `the gate refused subscription ${subscriptionId}: ${message}`, {
        details: { url: this.call.request.url, subscriptionId: subscriptionId.toString() },
      });
    }
    // Paying once for this call only: the subscription stays bound to the origin, so the calls
    // after it are served by it again as soon as it is active (resumed, renewed).
    return { kind: "payOnce", option: fallback };
  }

  async take(option: PaymentOption, body: PaymentRequired): Promise<Record<string, string>> {
    if (this.taken) {
      // Subscribed already in this call and the gate still asks: stop.
      throw new TollgateError(body.error, `the gate did not accept the subscription: ${body.message}`, {
        details: { url: this.call.request.url },
      });
    }
    this.taken = true;
    const { payer, options, planMaxPrice } = this.settings;
    const use = await useSubscription(payer, option, options.subscription, planMaxPrice);
    options.onSubscribe?.(use, this.call.request);
    const subscription = {
      subscriptionId: use.subscriptionId,
      planId: use.planId,
      audience: audienceOf([option], this.origin),
    };
    this.bind(subscription);
    return this.headersFor(subscription);
  }

  /** The option to pay once instead of a refused subscription, as the caller allowed, or none. */
  private async fallback(
    body: PaymentRequired,
    refusal: { error: PaymentRequired["error"]; message: string; subscriptionId: bigint },
  ): Promise<PaymentOption | undefined> {
    const { options, maxPrice } = this.settings;
    const inactive = refusal.error === "SubscriptionNotActive";
    const affordable = this.call.oneTimeOptions(body.accepts);
    if (inactive && options.onSubscriptionInactive === "error") return undefined;
    if (options.choose !== undefined) {
      return options.choose(body.accepts, {
        request: this.call.request,
        paymentRequired: body,
        maxPrice,
        affordable,
        refusal,
      });
    }
    if (!inactive || options.onSubscriptionInactive !== "pay-once") return undefined;
    const fallback = affordable[0];
    if (fallback === undefined) throw this.call.noOneTimeOption(body.accepts);
    return fallback;
  }

  /** The request carries `subscription` from now on, and so do later calls to this origin. */
  private bind(subscription: OriginSubscription): void {
    this.subscription = subscription;
    this.settings.payer.subscriptions?.remember({ ...subscription, origin: this.origin });
  }

  /** `X-Tollgate-Sub` and a sub-auth token for the gate's audience. */
  private headersFor(subscription: OriginSubscription): Promise<Record<string, string>> {
    const { payer } = this.settings;
    if (payer.subscriptionHeaders === undefined) {
      throw new TollgateError("InvalidRequest", "this payer cannot sign sub-auth tokens");
    }
    return payer.subscriptionHeaders(subscription.subscriptionId, subscription.audience);
  }

  /**
   * The error for a subscription the gate says is not active, with its state read from the chain.
   * A cancelled or unknown subscription can never serve again: it is forgotten, so the next call
   * meets the gate's terms afresh. A paused or overdue one stays bound: resuming or renewing it is
   * enough to be served again, and until then every call says why instead of paying.
   */
  private async notActive(subscriptionId: bigint, message: string): Promise<SubscriptionNotActiveError> {
    const { payer } = this.settings;
    const { request } = this.call;
    const state = await inactiveStateOf(payer.facilitator, subscriptionId, request.signal);
    if (state === "Cancelled" || state === "NotFound") payer.subscriptions?.forget(subscriptionId);
    return new SubscriptionNotActiveError({ subscriptionId, state, url: request.url, message });
  }
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

/**
 * Subscription options this payer may take out, cheapest per period first: the gate flags them with
 * `tollgate.subscriptionScheme`, on the payer's network, run through its facilitator, not deprecated,
 * and priced within `maxPrice` per period.
 */
function subscribableOptions(
  options: readonly PaymentOption[],
  payer: SchemePayer,
  maxPrice: bigint,
): PaymentOption[] {
  return cheapestFirst(options.filter((o) => isSubscribableOption(o, payer) && planCallPrice(o) <= maxPrice));
}

/** The subscription for a chosen `subscription` option: one already held for its plan, or a new one. */
async function useSubscription(
  payer: Payer,
  option: PaymentOption,
  terms: FetchWithPaymentOptions["subscription"],
  maxPrice: bigint | undefined,
): Promise<SubscriptionUse> {
  const planId = option.tollgate?.planId;
  if (planId === undefined || option.tollgate?.manager === undefined) {
    throw new TollgateError("InvalidRequest", "the chosen subscription option names no plan");
  }
  // A plan is run by the facilitator the gate names, on its network: the payer's must be that one.
  const mismatch = facilitatorMismatch([option], payer);
  if (mismatch !== undefined) {
    const { details } = mismatch;
    throw new TollgateError(
      details.reason === "other_network" ? "UnsupportedNetwork" : "InvalidRequest",
      `cannot take out the plan: ${mismatch.message}`,
      { details: { ...details, facilitator: option.tollgate.facilitator } },
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
