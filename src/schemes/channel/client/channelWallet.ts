/**
 * The payer's side of the `channel` scheme: open channels through the facilitator (gasless, one wallet
 * signature), sign a voucher per paid request with the channel's session key, keep the state in a
 * `ChannelWalletStore`, and open the next channel before the current one runs dry so a paid request
 * never waits for a block after the first.
 *
 * Invariants:
 * - The cumulative amount of a channel's vouchers never goes down, also across restarts with a
 *   persistent store: a voucher is written to the store before it is handed out.
 * - A voucher signs `max(signed, owed + price)`: the payer's running total of what its requests were
 *   charged. A request the gate answered 5xx (refunded) or refused takes its price off `owed`, so the
 *   credit it left pays the next request instead of being signed again. The gate never holds a voucher
 *   above `signed`, so whatever a gate says, a payer never pays more than it signed.
 * - A channel's deposit is taken from the wallet only through `approveDeposit`, and a top-up only
 *   through `approveTopUp` (the budget's hooks), each before its authorization leaves the process.
 * - A channel running low is topped up (relayed, gasless) rather than replaced, sized like a new one;
 *   payments keep using its remainder meanwhile, so steady state never waits for a block.
 * - A channel is opened for one gate's tag (its salt starts with the tag the 402 offered) and pays only
 *   terms with that tag: channels are kept per (contract, payee, token, tag).
 * - No channel is opened whose close delay is above `maxCloseDelay`: a seller cannot lock the deposit
 *   longer than the payer's bound should it vanish.
 *
 * Its parts: the live channels (channelBook.ts), the learnt routes (walletRoutes.ts), opens
 * (channelOpener.ts), top-ups and renewals (channelTopUps.ts), vouchers and their answers
 * (channelVouchers.ts), and closes (channelClosing.ts).
 */
import { randomBytes } from "node:crypto";
import type { Hex } from "viem";
import type { ChannelWithdrawResponse } from "../../../protocol/channels.ts";
import { systemClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { chainIdOf } from "../../../protocol/network.ts";
import { createChannelBook, nextAmountOf } from "./channelBook.ts";
import { type ChannelClosing, createChannelClosing } from "./channelClosing.ts";
import { createChannelOpener } from "./channelOpener.ts";
import { createChannelTokenDomainOf } from "./channelTokenDomain.ts";
import { createChannelTopUps } from "./channelTopUps.ts";
import { createChannelVouchers } from "./channelVouchers.ts";
import type { ChannelWalletContext } from "./channelWalletContext.ts";
import type { ChannelRecord } from "./channelWalletStore.ts";
import { createMemoryChannelWalletStore } from "./channelWalletStore.ts";
import type {
  ChannelCloseOutcome,
  ChannelTermsInput,
  ChannelVoucherPayment,
  ChannelWalletOptions,
} from "./channelWalletTypes.ts";
import { createWalletRoutes } from "./walletRoutes.ts";

export type {
  ChannelCloseOutcome,
  ChannelTermsInput,
  ChannelVoucherPayment,
  ChannelWalletOptions,
} from "./channelWalletTypes.ts";
export { closeDelayRefusal, DEFAULT_MAX_CHANNEL_CLOSE_DELAY } from "./closeDelayBound.ts";

export type ChannelWallet = {
  /**
   * Signs a voucher for one request at `terms.price`, opening a channel first when none has room
   * (`calls` sizes its deposit). Waits for a block only when it opens a channel.
   */
  pay(terms: ChannelTermsInput, options?: { calls?: number | undefined }): Promise<ChannelVoucherPayment>;
  /** A voucher from an open channel with room, or `undefined` — never opens, never waits. */
  payNow(terms: ChannelTermsInput): ChannelVoucherPayment | undefined;
  /**
   * Books the answer to a paid request: a refused or failed request gives its price back as credit;
   * `receipt` (the gate's `X-Tollgate-Channel-Receipt`) realigns what the payer thinks it owes.
   */
  settle(payment: ChannelVoucherPayment, status: number, receipt: string | null): void;
  /** The payer's channels as stored. */
  channels(): ChannelRecord[];
  /** Remembers that `method url` is sold by channel on `terms` (from its 402), to pay it up front. */
  learnRoute(method: string, url: string, terms: ChannelTermsInput): void;
  /** The terms `method url` was last sold on, if known. */
  routeTerms(method: string, url: string): ChannelTermsInput | undefined;
  /**
   * Asks to close a channel (relayed, gasless), then asks the seller's gate to close it cooperatively
   * (`cooperative: false` skips that): the seller's last voucher is claimed and the rest returned in one
   * transaction, at once. Without the gate's help the payer withdraws the rest after the close delay.
   */
  requestClose(
    channelId: Hex,
    closeOptions?: { cooperative?: boolean | undefined },
  ): Promise<ChannelCloseOutcome>;
  /** Re-reads a channel from the facilitator (deposit, claimed, close state) into the store. */
  refresh(channelId: Hex): Promise<ChannelRecord | undefined>;
  /**
   * Adds `amount` to an open channel's deposit: one wallet signature, relayed gasless by the facilitator
   * (`POST /channels/:id/top-up`); `approveTopUp` is asked first.
   */
  topUp(channelId: Hex, amount: bigint): Promise<ChannelRecord>;
  /**
   * Takes back what the seller did not claim once the close delay after `requestClose` is over — alone,
   * when the seller vanished (relayed gasless: `POST /channels/:id/withdraw`; anyone may send
   * `withdrawChannel` on chain too). Refused with `InvalidRequest` and `retryAfter` before the delay.
   */
  withdraw(channelId: Hex): Promise<ChannelWithdrawResponse>;
  /** When a channel last signed a voucher in this process (ms; its load or open time before that). */
  lastUsed(channelId: Hex): number | undefined;
};

/** The shared state and the parts that act on it, from the options with their defaults. */
function walletParts(options: ChannelWalletOptions) {
  const store = options.store ?? createMemoryChannelWalletStore();
  const clock = options.clock ?? systemClock;
  const chainId = chainIdOf(options.network);
  const book = createChannelBook({ store, clock, chainId });
  for (const record of store.load()) {
    if (record.network === options.network && record.status !== "closed") book.track(record);
  }
  const ctx: ChannelWalletContext = {
    options,
    store,
    clock,
    random: options.random ?? ((n: number) => new Uint8Array(randomBytes(n))),
    chainId,
    book,
    routes: createWalletRoutes(book),
    tokenDomainOf: createChannelTokenDomainOf(options, chainId),
  };
  const opener = createChannelOpener(ctx);
  const topUps = createChannelTopUps(ctx, opener, options.renewBelow ?? 0.25);
  const vouchers = createChannelVouchers({ store, clock, book });
  const closing: ChannelClosing = createChannelClosing(ctx);
  return { book, routes: ctx.routes, opener, topUps, vouchers, closing };
}

/**
 * @example
 * const wallet = createChannelWallet({ account, network: "eip155:8453", facilitator,
 *   store: await createFileChannelWalletStore({ path: ".tollgate/channels.journal" }) });
 * const { header } = await wallet.pay(terms, { calls: 500 });
 */
export function createChannelWallet(options: ChannelWalletOptions): ChannelWallet {
  const { book, routes, opener, topUps, vouchers, closing } = walletParts(options);
  return {
    async pay(terms, payOptions = {}) {
      if (book.usable(terms) === undefined) {
        // Ran dry while its top-up is on its way: wait for it rather than open another channel.
        const pending = topUps.pending(terms);
        if (pending !== undefined) await pending;
      }
      const entry =
        book.usable(terms) ??
        (await opener.inFlight(terms)) ??
        (await opener.openOnce(terms, payOptions.calls));
      if (nextAmountOf(entry.record, terms.price) > entry.record.deposit) {
        // Opened concurrently by another caller and already used up: open another.
        return this.pay(terms, payOptions);
      }
      const payment = vouchers.sign(entry, terms.price);
      topUps.renewIfLow(entry, terms);
      return payment;
    },
    payNow(terms) {
      const entry = book.usable(terms);
      if (entry === undefined) return undefined;
      const payment = vouchers.sign(entry, terms.price);
      topUps.renewIfLow(entry, terms);
      return payment;
    },
    settle: vouchers.settle,
    channels: () => [...book.live.values()].map((e) => e.record),
    learnRoute: routes.learn,
    routeTerms: routes.termsOf,
    requestClose: closing.requestClose,
    refresh: closing.refresh,
    async topUp(channelId, amount) {
      const entry = book.live.get(channelId);
      if (entry === undefined) throw new TollgateError("NotFound", "no such channel in this wallet");
      await topUps.topUp(entry, undefined, amount);
      return entry.record;
    },
    withdraw: closing.withdraw,
    lastUsed: (channelId) => book.usedAt.get(channelId),
  };
}
