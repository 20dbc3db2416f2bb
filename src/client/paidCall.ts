/**
 * One call of `fetchWithPayment`: the request sent, its 402s answered by the registered client parts,
 * and the paid retries (the module's header, fetchWithPayment.ts, states the flow and its limits).
 *
 * Invariants:
 * - The request body is buffered once, so every attempt sends the same bytes.
 * - At most one credential kept over attempts (a session's, e.g. a subscription) is carried at a
 *   time; a 402 to it is answered by its session before anything is paid.
 * - After a payment, only a 402 `InvalidPaymentProof` is paid again, at most `maxProofRetries` times.
 */
import type { FetchFn } from "../http/facilitatorClient.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type {
  ClientFlowRequest,
  ClientFlows,
  ClientSchemePart,
  ClientSession,
  SchemeId,
  SchemePayer,
} from "../schemes/types.ts";
import type { ChoosePaymentOption, FetchWithPaymentOptions } from "./fetchOptions.ts";
import { affordableOptions, type CallPayers, noAffordableOption } from "./payableOptions.ts";
import type { PaymentReceipt } from "./payerTypes.ts";
import { type PaymentRequiredOffer, readPaymentRequired } from "./readPaymentRequired.ts";

/** What every call of one `fetchWithPayment` shares, checked once at its construction. */
export type PaidCallSettings = {
  fetch: FetchFn;
  payer: SchemePayer;
  options: FetchWithPaymentOptions;
  /** The most one payment may cost, smallest unit. */
  maxPrice: bigint;
  clock: Clock;
  maxProofRetries: number;
  resend: { maxResends: number; delayMs: number; maxDelayMs: number; sleep(ms: number): Promise<void> };
  choose: ChoosePaymentOption;
  /** The parts that pay options per call, by scheme. */
  payers: CallPayers;
  /** Those of them whose payments are the payer's own one-time payments. */
  oneTimePayers: CallPayers;
  /** Parts that may send a credential before any 402, in precedence order. */
  upFrontParts: readonly (ClientSchemePart & Required<Pick<ClientSchemePart, "upFront">>)[];
  /** Each part's flows, by scheme, in precedence order. */
  flows: readonly { id: SchemeId; flows: ClientFlows }[];
};

/** What a paying part is told of a request that got no answer (refused, cut, timed out). */
const NO_ANSWER = () => new Response(null, { status: 503 });

/** Sends `original`, paying its 402s, and answers the response that ends the call. */
export async function runPaidCall(settings: PaidCallSettings, original: Request): Promise<Response> {
  // Buffer once: the paid retry must resend exactly the same body.
  const body = original.body === null ? undefined : await original.arrayBuffer();
  const call = new PaidCall(settings, original, body);
  let response = await call.first();
  for (;;) {
    if (response.status !== 402) return response;
    const offer = await readPaymentRequired(response.clone());
    if (offer === undefined) return response;
    const next = await call.answer(response, offer);
    if (next.final) return next.response;
    response = next.response;
  }
}

class PaidCall {
  /** Payments made in this call. */
  private attempt = 0;
  /** The session whose credential the request carries now. */
  private carrying: ClientSession | undefined;
  private readonly sessions = new Map<SchemeId, ClientSession>();
  private readonly view: ClientFlowRequest;

  constructor(
    private readonly settings: PaidCallSettings,
    private readonly original: Request,
    private readonly body: ArrayBuffer | undefined,
  ) {
    const { maxPrice, payer, oneTimePayers } = settings;
    this.view = {
      request: original,
      send: (headers) => this.send(headers),
      oneTimeOptions: (accepts) => affordableOptions(accepts, payer, maxPrice, oneTimePayers),
      noOneTimeOption: (accepts) => noAffordableOption(accepts, payer, maxPrice, oneTimePayers),
      isOneTime: (option) => option !== undefined && oneTimePayers(option.scheme) !== undefined,
    };
    for (const { id, flows } of settings.flows) {
      if (flows.session !== undefined) this.sessions.set(id, flows.session(this.view));
    }
  }

  /** Sends the request with `extra` headers added. */
  send(extra?: Record<string, string>): Promise<Response> {
    const original = this.original;
    const headers = new Headers(original.headers);
    for (const [name, value] of Object.entries(extra ?? {})) headers.set(name, value);
    return this.settings.fetch(
      new Request(original.url, {
        method: original.method,
        headers,
        body: this.body ?? null,
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
  }

  /**
   * The first attempt: with a session's credential held for the origin (a subscription, so a
   * subscribed call costs no 402), else one a part pays ahead on a known route (an open channel: one
   * HTTP exchange), else bare.
   */
  async first(): Promise<Response> {
    for (const session of this.sessions.values()) {
      const headers = await session.upFront();
      if (headers === undefined) continue;
      this.carrying = session;
      return this.send(headers);
    }
    for (const part of this.settings.upFrontParts) {
      const headers = await part.upFront(this.original, this.settings.payer);
      if (headers === undefined) continue;
      // The part that paid ahead books the answer (a channel takes a refused request's price back),
      // and a request that got no answer as a 5xx: it may never have reached the gate.
      const payment = { headers, amount: 0n };
      let response: Response;
      try {
        response = await this.send(headers);
      } catch (error) {
        await part.settled?.(payment, NO_ANSWER());
        throw error;
      }
      await part.settled?.(payment, response);
      return response;
    }
    return this.send();
  }

  /** Answers one 402: the response of the next attempt, and whether it ends the call. */
  async answer(
    response: Response,
    offer: PaymentRequiredOffer,
  ): Promise<{ response: Response; final: boolean }> {
    const more = (next: Response) => ({ response: next, final: false });
    if (this.carrying !== undefined && offer.kind === "tollgate") {
      const outcome = await this.carrying.refused(offer.body);
      if (outcome.kind === "send") return more(await this.send(outcome.headers));
      this.carrying = undefined;
      if (outcome.kind === "payOnce") {
        return more(await this.payWith(this.oneTimePart(outcome.option), outcome.option));
      }
    }
    this.assertMayPayAgain(offer);
    if (offer.kind !== "tollgate") return { response: await this.payUnread(response), final: true };
    const { options, choose, payer, maxPrice, payers } = this.settings;
    const chosen = await choose(offer.body.accepts, {
      request: this.original,
      paymentRequired: offer.body,
      maxPrice,
      affordable: affordableOptions(offer.body.accepts, payer, maxPrice, payers),
    });
    if (chosen === undefined) {
      if (options.choose === undefined) throw noAffordableOption(offer.body.accepts, payer, maxPrice, payers);
      return { response, final: true };
    }
    const part = payers(chosen.scheme);
    if (part?.pay !== undefined) return more(await this.payWith(part, chosen));
    const session = this.sessions.get(chosen.scheme);
    if (session?.take === undefined) {
      throw new TollgateError("InvalidRequest", `no registered scheme pays "${chosen.scheme}" options`, {
        details: { scheme: chosen.scheme },
      });
    }
    const headers = await session.take(chosen, offer.body);
    this.carrying = session;
    return more(await this.send(headers));
  }

  /** After a payment, only a refused proof is paid again, and at most `maxProofRetries` times. */
  private assertMayPayAgain(offer: PaymentRequiredOffer): void {
    if (this.attempt === 0) return;
    const refusal = offer.kind === "tollgate" ? offer.body : undefined;
    if (refusal?.error === "InvalidPaymentProof" && this.attempt <= this.settings.maxProofRetries) return;
    throw new TollgateError(
      refusal?.error === undefined || refusal.error === "PaymentRequired"
        ? "InvalidPaymentProof"
        : refusal.error,
      `the gate refused the payment: ${refusal?.message ?? "402 after paying"}`,
      { details: { url: this.original.url, attempts: this.attempt } },
    );
  }

  /** Pays `chosen` with its part and sends the request with its credential. */
  private async payWith(part: ClientSchemePart, chosen: PaymentOption): Promise<Response> {
    const { options, payer, maxPrice, clock } = this.settings;
    if (part.pay === undefined) {
      throw new TollgateError("InvalidRequest", `no registered scheme pays "${chosen.scheme}" options`, {
        details: { scheme: chosen.scheme },
      });
    }
    const payment = await part.pay(chosen, {
      payer,
      maxAmount: maxPrice,
      request: this.original,
      signal: this.original.signal,
      clock,
    });
    if (part.oneTime === true) options.onPayment?.(payment.receipt as PaymentReceipt, this.original);
    else options.onSchemePayment?.({ ...payment, scheme: chosen.scheme }, this.original);
    this.attempt++;
    let paid: Response;
    try {
      paid = await this.send(payment.headers);
    } catch (error) {
      // No answer: booked as a 5xx (a channel takes the request's price back; channelFetch.ts).
      await part.settled?.(payment, NO_ANSWER());
      throw error;
    }
    if (paid.status >= 500 && part.resend !== undefined) {
      return part.resend(payment, paid, {
        request: this.original,
        send: (headers) => this.send(headers),
        clock,
        ...this.settings.resend,
      });
    }
    await part.settled?.(payment, paid);
    return paid;
  }

  private oneTimePart(option: PaymentOption): ClientSchemePart {
    const part = this.settings.oneTimePayers(option.scheme);
    if (part === undefined) {
      throw new TollgateError("InvalidRequest", `no registered scheme pays "${option.scheme}" options once`, {
        details: { scheme: option.scheme },
      });
    }
    return part;
  }

  /** A 402 without a Tollgate body: the first part that reads its terms pays it, once. */
  private async payUnread(response: Response): Promise<Response> {
    for (const { flows } of this.settings.flows) {
      const paid = await flows.payUnread?.(response, this.view);
      if (paid !== undefined) return paid;
    }
    return response;
  }
}
