/**
 * The client part of the `channel` scheme: an option is payable when it is a well-formed `channel`
 * option on the payer's network, settled by the payer's facilitator, and the payer has a channel wallet
 * (`createPayer({ channels })`). Paying signs a voucher (opening a channel first when none has room);
 * `upFront` pays a route whose terms an earlier 402 taught, so a paid call is one HTTP exchange;
 * `settled` books the answer (a refused or failed request's price becomes credit).
 */
import { sameFacilitatorUrl } from "../../http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../protocol/channelVoucher.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { ClientPayment, ClientSchemePart, SchemePayer } from "../types.ts";
import { CHANNEL_RECEIPT_HEADER } from "./channelHeaders.ts";
import { channelTermsOf } from "./channelTerms.ts";
import type { ChannelVoucherPayment, ChannelWallet } from "./client/channelWallet.ts";

/** A payer that can pay by channel: `createPayer({ channels })` gives one. */
export type ChannelPayer = SchemePayer & { channels?: ChannelWallet | undefined };

/** What a channel payment carries as its receipt: the voucher and the wallet to book it in. */
export type ChannelReceipt = { wallet: ChannelWallet; payment: ChannelVoucherPayment };

const walletOf = (payer: SchemePayer) => (payer as ChannelPayer).channels;

/**
 * Up-front credentials handed out, by the very headers object `upFront` returned, so that `settled`
 * (told only the headers) books the right voucher. Weak: forgotten with the request.
 */
const upFrontReceipts = new WeakMap<object, ChannelReceipt>();

/**
 * Gives a payer (`createPayer(...)`) a channel wallet, so `fetchWithPayment` pays `channel` options with
 * it and sends vouchers up front on known routes. Returns the same payer.
 * @example
 * const payer = withChannelWallet(createPayer({ account, network, facilitator }), createChannelWallet({ … }));
 */
export function withChannelWallet<P extends object>(
  payer: P,
  wallet: ChannelWallet,
): P & { channels: ChannelWallet } {
  Object.defineProperty(payer, "channels", { value: wallet, enumerable: false, configurable: true });
  return payer as P & { channels: ChannelWallet };
}

const toClientPayment = (wallet: ChannelWallet, payment: ChannelVoucherPayment): ClientPayment => ({
  headers: { [CHANNEL_VOUCHER_HEADER]: payment.header },
  amount: payment.price,
  receipt: { wallet, payment } satisfies ChannelReceipt,
});

export const channelClient: ClientSchemePart & {
  /** `upFront` with the payment to book its answer with (`settled`). */
  payUpFront(request: Request, payer: SchemePayer): ClientPayment | undefined;
} = {
  payable(option, payer) {
    const terms = channelTermsOf(option);
    return (
      terms !== undefined &&
      walletOf(payer) !== undefined &&
      option.network === payer.network &&
      sameFacilitatorUrl(terms.facilitator, payer.facilitator.url)
    );
  },
  callPrice: (option) => BigInt(option.amount),
  async pay(option, context) {
    const wallet = walletOf(context.payer);
    const terms = channelTermsOf(option);
    if (wallet === undefined || terms === undefined) {
      throw new TollgateError("InvalidRequest", "paying a channel option needs createPayer({ channels })");
    }
    if (terms.price > context.maxAmount) {
      throw new TollgateError(
        "PriceCeilingExceeded",
        "the channel's price per request is above the ceiling",
        {
          details: { price: terms.price.toString(), maxAmount: context.maxAmount.toString() },
        },
      );
    }
    wallet.learnRoute(context.request.method, context.request.url, terms);
    return toClientPayment(wallet, await wallet.pay(terms));
  },
  payUpFront(request, payer) {
    const wallet = walletOf(payer);
    const terms = wallet?.routeTerms(request.method, request.url);
    if (wallet === undefined || terms === undefined) return undefined;
    const payment = wallet.payNow(terms);
    return payment === undefined ? undefined : toClientPayment(wallet, payment);
  },
  async upFront(request, payer) {
    const payment = channelClient.payUpFront(request, payer);
    if (payment === undefined) return undefined;
    upFrontReceipts.set(payment.headers, payment.receipt as ChannelReceipt);
    return payment.headers;
  },
  settled(payment, response) {
    const receipt = (payment.receipt ?? upFrontReceipts.get(payment.headers)) as
      | Partial<ChannelReceipt>
      | undefined;
    if (receipt?.wallet === undefined || receipt.payment === undefined) return;
    receipt.wallet.settle(receipt.payment, response.status, response.headers.get(CHANNEL_RECEIPT_HEADER));
  },
};
