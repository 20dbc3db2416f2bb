/**
 * Where a gate keeps, per channel, the best voucher it holds and what it served against it.
 *
 * The tally of a channel is two numbers (docs/channels.md, "Concurrency rule"):
 * - `highest`: the largest cumulative amount of a valid voucher the gate holds — what the seller claims;
 * - `spent`: the prices of the requests served on the channel (minus refunds of unserved ones).
 * A request with voucher `v` and price `p` is charged iff `spent + p ≤ max(highest, v)`; then
 * `(highest, spent) := (max(highest, v), spent + p)`, atomically. Invariant: `spent ≤ highest`.
 * A payer that signs its running total with each request is charged exactly once per request whatever
 * order its concurrent requests arrive in (a voucher that arrives after a larger one is covered by the
 * credit `highest − spent` the larger one left), and the seller claims exactly what was signed.
 *
 * Contract shared by every implementation:
 * - `charge` is atomic per channel, across processes for the shared stores: of concurrent charges, each
 *   sees the tally the previous one left. It resolves only once the new tally is durable by the
 *   store's promise (journal: written to the file; PostgreSQL: committed; Redis: acknowledged).
 * - A channel without a tally starts from `floor` (what was already claimed on chain) for both numbers.
 * - `refund` lowers `spent` by at most what it was charged, never below the channel's floor; `highest`
 *   and its signature stay (the voucher was signed; its credit pays the payer's next request).
 * - `unforwarded` lists the channels whose `highest` was not yet handed to the facilitator;
 *   `markForwarded(id, amount)` records that `amount` was (a lower amount than recorded is ignored).
 * - `seal` (a cooperative close) is atomic with `charge`: a charge that resolves `charged` was persisted
 *   before the seal, and every charge after it resolves `{ charged: false, sealed: true }`, across
 *   processes for the shared stores and across restarts. So the tally `seal` returns is final: the
 *   voucher it holds covers every request the seller served on the channel.
 * - `tag` is the store's identity: 8 random bytes made once with the store (the journal's file, the
 *   PostgreSQL database, the Redis namespace) and the same for every instance sharing it and across
 *   restarts. Its gates offer it and serve only channels opened with it, so two stores never charge the
 *   same channel (docs/channels.md, "One voucher, one gate").
 */
import { randomBytes } from "node:crypto";
import type { Hex } from "viem";

/** A channel's two numbers. */
export type ChannelTally = { highest: bigint; spent: bigint };

/** What a charge needs: the voucher (already verified) and the request's price. */
export type ChargeInput = {
  channelId: Hex;
  cumulativeAmount: bigint;
  /** The voucher's 64-byte P-256 signature, kept to claim `highest`. */
  signature: Uint8Array;
  price: bigint;
  /** Where a channel the store has never seen starts: its on-chain `claimed`. */
  floor: bigint;
};

export type ChargeOutcome = {
  charged: boolean;
  tally: ChannelTally;
  /** The channel was sealed for a cooperative close: it is charged no more. */
  sealed?: boolean | undefined;
};

/** A voucher to hand to the facilitator. */
export type ForwardableVoucher = { channelId: Hex; cumulativeAmount: bigint; signature: Uint8Array };

export type VoucherStore = {
  charge(input: ChargeInput): Promise<ChargeOutcome>;
  refund(channelId: Hex, price: bigint): Promise<void>;
  tally(channelId: Hex): Promise<ChannelTally | undefined>;
  unforwarded(limit: number): Promise<ForwardableVoucher[]>;
  markForwarded(channelId: Hex, cumulativeAmount: bigint): Promise<void>;
  /**
   * Seals a channel (creating its tally at `floor` when the store never saw it): no charge passes on it
   * afterwards. Returns the final tally. Sealing again returns the same tally.
   */
  seal(channelId: Hex, floor: bigint): Promise<ChannelTally>;
  /** The store's channel tag (8 bytes, lowercase 0x-hex): the same for its whole life. */
  tag(): Promise<Hex>;
  close(): Promise<void>;
};

/** A fresh store tag: 8 random bytes. */
export function newChannelTag(): Hex {
  return `0x${randomBytes(8).toString("hex")}`;
}

/** The tally after charging `price` on voucher `cumulative`, or `undefined` when it does not cover it. */
export function chargeTally(
  current: ChannelTally,
  cumulative: bigint,
  price: bigint,
): ChannelTally | undefined {
  const highest = cumulative > current.highest ? cumulative : current.highest;
  const spent = current.spent + price;
  return spent <= highest ? { highest, spent } : undefined;
}

/** One channel's record in the in-process stores. */
export type ChannelRecord = ChannelTally & {
  signature: Uint8Array;
  forwarded: bigint;
  floor: bigint;
  /** Sealed for a cooperative close: charged no more. */
  sealed?: boolean | undefined;
};

/**
 * The tallies in a `Map`, shared by the memory and journal stores: every operation is synchronous, so
 * in one process a charge is atomic without locks.
 */
export function createTallyMap(records: Map<string, ChannelRecord> = new Map()) {
  return {
    records,
    /** Charges and returns the outcome plus the record to persist when charged. */
    charge(input: ChargeInput): ChargeOutcome & { record?: ChannelRecord } {
      const current = records.get(input.channelId);
      const base: ChannelTally = current ?? { highest: input.floor, spent: input.floor };
      if (current?.sealed === true) {
        return { charged: false, sealed: true, tally: { highest: base.highest, spent: base.spent } };
      }
      const next = chargeTally(base, input.cumulativeAmount, input.price);
      if (next === undefined) return { charged: false, tally: { highest: base.highest, spent: base.spent } };
      const record: ChannelRecord = {
        ...next,
        signature:
          current === undefined || input.cumulativeAmount > current.highest
            ? input.signature
            : current.signature,
        forwarded: current?.forwarded ?? input.floor,
        floor: current?.floor ?? input.floor,
      };
      records.set(input.channelId, record);
      return { charged: true, tally: next, record };
    },
    refund(channelId: Hex, price: bigint): ChannelRecord | undefined {
      const current = records.get(channelId);
      if (current === undefined) return undefined;
      let spent = current.spent - price;
      if (spent < current.floor) spent = current.floor;
      const record = { ...current, spent };
      records.set(channelId, record);
      return record;
    },
    unforwarded(limit: number): ForwardableVoucher[] {
      const out: ForwardableVoucher[] = [];
      for (const [channelId, record] of records) {
        if (out.length >= limit) break;
        if (record.highest > record.forwarded) {
          out.push({
            channelId: channelId as Hex,
            cumulativeAmount: record.highest,
            signature: record.signature,
          });
        }
      }
      return out;
    },
    /** Seals a channel; returns the record to persist (`changed` false when it already was sealed). */
    seal(channelId: Hex, floor: bigint): { record: ChannelRecord; changed: boolean } {
      const current = records.get(channelId);
      if (current?.sealed === true) return { record: current, changed: false };
      const record: ChannelRecord =
        current === undefined
          ? {
              highest: floor,
              spent: floor,
              forwarded: floor,
              floor,
              signature: new Uint8Array(0),
              sealed: true,
            }
          : { ...current, sealed: true };
      records.set(channelId, record);
      return { record, changed: true };
    },
    markForwarded(channelId: Hex, cumulativeAmount: bigint): ChannelRecord | undefined {
      const current = records.get(channelId);
      if (current === undefined || cumulativeAmount <= current.forwarded) return undefined;
      const record = { ...current, forwarded: cumulativeAmount };
      records.set(channelId, record);
      return record;
    },
  };
}

/**
 * A voucher store in this process's memory: for tests and for a gate that accepts losing what it
 * served since the last forward when the process dies (prefer the journal, the default).
 */
export function createMemoryVoucherStore(options: { tag?: Hex | undefined } = {}): VoucherStore {
  const map = createTallyMap();
  const tag = (options.tag ?? newChannelTag()).toLowerCase() as Hex;
  return {
    async charge(input) {
      const { charged, tally, sealed } = map.charge(input);
      return { charged, tally, sealed };
    },
    async refund(channelId, price) {
      map.refund(channelId, price);
    },
    async tally(channelId) {
      const record = map.records.get(channelId);
      return record === undefined ? undefined : { highest: record.highest, spent: record.spent };
    },
    async unforwarded(limit) {
      return map.unforwarded(limit);
    },
    async markForwarded(channelId, cumulativeAmount) {
      map.markForwarded(channelId, cumulativeAmount);
    },
    async seal(channelId, floor) {
      const { record } = map.seal(channelId, floor);
      return { highest: record.highest, spent: record.spent };
    },
    async tag() {
      return tag;
    },
    async close() {},
  };
}
