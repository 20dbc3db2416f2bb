/**
 * The channel wallet's book of live channels: each record with its voucher signer, indexed by id and by
 * terms (contract, payee, token, tag), when each last signed, and what each was last funded with.
 *
 * Invariant: `put` writes the whole record to the store as it changes it in memory, so the store never
 * lags behind what the wallet acts on.
 */
import type { Clock } from "../../../protocol/clock.ts";
import type { ChannelRecord, ChannelWalletStore } from "./channelWalletStore.ts";
import { createVoucherSigner, importSessionKeyPrivate, type VoucherSigner } from "./sessionKey.ts";

/** A live channel: its record as last written and the signer of its vouchers. */
export type Live = { record: ChannelRecord; signer: VoucherSigner };

/** What keys a channel to the gate it pays: its contract, payee, token and tag. */
export const termsKey = (t: { contract: string; payee: string; token: string; tag?: string | undefined }) =>
  `${t.contract}|${t.payee}|${t.token}|${t.tag ?? ""}`.toLowerCase();

/** The larger of two amounts (`Math.max` takes no bigint). */
export function maxOf(a: bigint, b: bigint): bigint {
  if (a > b) return a;
  return b;
}

/** The smaller of two amounts. */
export function minOf(a: bigint, b: bigint): bigint {
  if (a < b) return a;
  return b;
}

/** Room left on a channel for new vouchers. */
export const roomOf = (r: ChannelRecord) => r.deposit - maxOf(r.signed, r.owed);

/** The cumulative amount the next voucher at `price` signs: never below what was signed. */
export const nextAmountOf = (r: ChannelRecord, price: bigint) => maxOf(r.signed, r.owed + price);

export type ChannelBook = {
  /** Live channels by id (a closed one leaves). */
  live: Map<string, Live>;
  /** When a channel last signed a voucher in this process (ms; its load or open time before that). */
  usedAt: Map<string, number>;
  /** The last amount a channel was funded with (open or top-up): the size its renewal repeats. */
  funded: Map<string, bigint>;
  /** Starts keeping a record live. */
  track(record: ChannelRecord): Live;
  /** Changes a live channel's record and writes it whole to the store. */
  put(entry: Live, changes: Partial<ChannelRecord>): void;
  /** The live channels kept for these terms (oldest first). */
  onTerms(terms: Parameters<typeof termsKey>[0]): Live[];
  /** An open channel on these terms with room for one more request at `price`. */
  usable(terms: Parameters<typeof termsKey>[0] & { price: bigint }): Live | undefined;
};

export function createChannelBook(deps: {
  store: ChannelWalletStore;
  clock: Clock;
  chainId: number;
}): ChannelBook {
  const live = new Map<string, Live>();
  const byTerms = new Map<string, Live[]>();
  const usedAt = new Map<string, number>();
  const funded = new Map<string, bigint>();

  function track(record: ChannelRecord): Live {
    const entry: Live = {
      record,
      signer: createVoucherSigner(
        importSessionKeyPrivate(record.sessionKey),
        { chainId: deps.chainId, channels: record.contract },
        record.channelId,
      ),
    };
    live.set(record.channelId, entry);
    usedAt.set(record.channelId, deps.clock.now());
    const k = termsKey(record);
    const list = byTerms.get(k) ?? [];
    list.push(entry);
    byTerms.set(k, list);
    return entry;
  }

  function put(entry: Live, changes: Partial<ChannelRecord>) {
    entry.record = { ...entry.record, ...changes };
    deps.store.put(entry.record);
  }

  const onTerms = (terms: Parameters<typeof termsKey>[0]) => byTerms.get(termsKey(terms)) ?? [];

  function usable(terms: Parameters<typeof termsKey>[0] & { price: bigint }): Live | undefined {
    for (const entry of onTerms(terms)) {
      const r = entry.record;
      if (r.status === "open" && nextAmountOf(r, terms.price) <= r.deposit) return entry;
    }
    return undefined;
  }

  return { live, usedAt, funded, track, put, onTerms, usable };
}
