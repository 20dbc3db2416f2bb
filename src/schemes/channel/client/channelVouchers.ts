/**
 * Signs a payer's vouchers and books the gate's answers to them.
 *
 * Invariants:
 * - A voucher's cumulative amount is written to the store before the voucher is handed out, so a
 *   restart never signs lower than a voucher that left.
 * - A voucher signs `max(signed, owed + price)`; a refused or failed request takes its price off `owed`,
 *   and a 402's receipt can raise `owed` only up to what was signed.
 */
import type { Clock } from "../../../protocol/clock.ts";
import { type ChannelBook, type Live, minOf, nextAmountOf } from "./channelBook.ts";
import type { ChannelWalletStore } from "./channelWalletStore.ts";
import type { ChannelVoucherPayment } from "./channelWalletTypes.ts";

export type ChannelVouchers = {
  /** Signs the next voucher of a channel for one request at `price`. */
  sign(entry: Live, price: bigint): ChannelVoucherPayment;
  /** Books the answer to a paid request (see `ChannelWallet.settle`). */
  settle(payment: ChannelVoucherPayment, status: number, receipt: string | null): void;
};

/** What a gate's receipt after a 402 says it charged this channel so far, if it is well formed. */
function receiptSpent(receipt: string, channelId: string): bigint | undefined {
  const parts = receipt.split(".");
  if (parts.length === 3 && parts[0] === channelId && /^(0|[1-9][0-9]{0,77})$/.test(parts[2] ?? "")) {
    return BigInt(parts[2]!);
  }
  return undefined;
}

export function createChannelVouchers(deps: {
  store: ChannelWalletStore;
  clock: Clock;
  book: ChannelBook;
}): ChannelVouchers {
  const { store, book } = deps;

  function sign(entry: Live, price: bigint): ChannelVoucherPayment {
    const r = entry.record;
    const cumulativeAmount = nextAmountOf(r, price);
    const owed = r.owed + price;
    // Durable before the voucher leaves: a restart never signs lower than this.
    store.progress(r.channelId, cumulativeAmount, owed);
    entry.record = { ...r, signed: cumulativeAmount, owed };
    book.usedAt.set(r.channelId, deps.clock.now());
    return { channelId: r.channelId, header: entry.signer.header(cumulativeAmount), cumulativeAmount, price };
  }

  function settle(payment: ChannelVoucherPayment, status: number, receipt: string | null) {
    const entry = book.live.get(payment.channelId);
    if (entry === undefined) return;
    const r = entry.record;
    let owed = r.owed;
    if (status >= 500 || status === 402) owed = owed >= payment.price ? owed - payment.price : 0n;
    if (receipt !== null && status === 402) {
      // The gate's tally after refusing: `spent` is what it charged this channel so far. Never above
      // what was signed (the gate holds nothing higher), so taking it can only move `owed` up to it.
      const spent = receiptSpent(receipt, r.channelId);
      if (spent !== undefined && spent > owed) owed = minOf(spent, r.signed);
    }
    if (owed !== r.owed) {
      store.progress(r.channelId, r.signed, owed);
      entry.record = { ...r, owed };
    }
  }

  return { sign, settle };
}
