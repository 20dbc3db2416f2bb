/**
 * A `fetch` that pays by channel only: the smallest channel client, for hosts that want nothing else
 * (and what bench/channel.ts measures). On a route whose terms it knows it sends the voucher with the
 * first attempt (one HTTP exchange per paid call); on a 402 it reads the `channel` option, opens a
 * channel when none has room, and sends the request once more. A stale voucher (the gate's tally moved
 * past what this payer thought it owed, e.g. after a lost answer) is re-signed once from the gate's
 * receipt. `fetchWithPayment` does the same through the scheme registry, among the other schemes.
 */

import { readPaymentRequired } from "../../../client/readPaymentRequired.ts";
import type { FetchFn } from "../../../http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../../protocol/channelVoucher.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { CHANNEL_RECEIPT_HEADER } from "../channelHeaders.ts";
import { channelTermsOf } from "../channelTerms.ts";
import type { ChannelTermsInput, ChannelVoucherPayment, ChannelWallet } from "./channelWallet.ts";

export type ChannelFetchOptions = {
  wallet: ChannelWallet;
  /** The most one request may cost, smallest unit (a 402 asking more is refused). */
  maxPrice: bigint;
  /** Requests a new channel's deposit is sized for (default: the wallet's). */
  calls?: number | undefined;
  /** Accept only these payees (default: any). */
  payees?: readonly string[] | undefined;
};

/**
 * @example
 * const paidFetch = createChannelFetch(fetch, { wallet, maxPrice: 10_000n, calls: 1_000 });
 * const response = await paidFetch("https://api.example.com/item");
 */
export function createChannelFetch(fetch: FetchFn, options: ChannelFetchOptions): FetchFn {
  const payees = options.payees?.map((p) => p.toLowerCase());

  const send = async (url: string, init: RequestInit, payment: ChannelVoucherPayment | undefined) => {
    const headers = new Headers(init.headers);
    if (payment !== undefined) headers.set(CHANNEL_VOUCHER_HEADER, payment.header);
    let response: Response;
    try {
      response = await fetch(url, { ...init, headers });
    } catch (error) {
      // No answer (connection refused or cut, timeout): the request may never have reached the gate,
      // so its price is taken off `owed` as for a 5xx, and the next voucher does not pay for it. Had
      // the gate charged it after all, its stale refusal's receipt realigns `owed` on the next call.
      if (payment !== undefined) options.wallet.settle(payment, 503, null);
      throw error;
    }
    if (payment !== undefined) {
      options.wallet.settle(payment, response.status, response.headers.get(CHANNEL_RECEIPT_HEADER));
    }
    return response;
  };

  const termsOf402 = async (
    response: Response,
    paid: ChannelVoucherPayment | undefined,
  ): Promise<ChannelTermsInput | undefined> => {
    const offer = await readPaymentRequired(response);
    if (offer?.kind !== "tollgate") return undefined;
    const refused = offer.body.error;
    if (paid !== undefined && (refused === "ChannelClosing" || refused === "ChannelDepositExhausted")) {
      // The channel cannot take this voucher: learn its state so the next payment uses another.
      await options.wallet.refresh(paid.channelId).catch(() => undefined);
    }
    for (const option of offer.body.accepts) {
      const terms = channelTermsOf(option);
      if (terms === undefined) continue;
      if (payees !== undefined && !payees.includes(terms.payee.toLowerCase())) continue;
      if (terms.price > options.maxPrice) {
        throw new TollgateError(
          "PriceCeilingExceeded",
          "the channel's price per request is above the ceiling",
          {
            details: { price: terms.price.toString(), maxPrice: options.maxPrice.toString() },
          },
        );
      }
      return terms;
    }
    return undefined;
  };

  return async (input, init = {}) => {
    if (input instanceof Request) {
      throw new TollgateError("InvalidRequest", "channel fetch takes a URL and init, not a Request");
    }
    const url = String(input);
    const method = (init.method ?? "GET").toUpperCase();
    const known = options.wallet.routeTerms(method, url);
    const upFront = known === undefined ? undefined : options.wallet.payNow(known);
    let paid = upFront;
    let response = await send(url, init, paid);
    for (let attempt = 0; attempt < 2 && response.status === 402; attempt++) {
      const terms = await termsOf402(response, paid);
      if (terms === undefined) return response; // not sold by channel (or not to us): the caller decides
      options.wallet.learnRoute(method, url, terms);
      paid = await options.wallet.pay(terms, { calls: options.calls });
      response = await send(url, init, paid);
    }
    return response;
  };
}
