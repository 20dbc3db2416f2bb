/**
 * `POST /channels/vouchers` (the payee's provider API key): a gate hands over the latest voucher of each
 * of its channels, and the facilitator keeps the highest verified one per channel for the claim worker.
 *
 * Each voucher is checked as the contract will check it: the channel exists (read from the chain the
 * first time), it is this provider's (payee), it is open, the amount is within the deposit (re-read once
 * when above it: a top-up may have landed), and the session key signed it (P-256, node:crypto). A voucher
 * at or below the one held is `ignored` before any signature work, so resending is idempotent and cheap.
 * A rejected voucher changes nothing and says why; it never fails the others. The verified vouchers of
 * one handover are stored together, in one transaction.
 */
import type { KeyObject } from "node:crypto";
import { type Address, getAddress, type Hex } from "viem";
import type { ReadClient } from "../../../chain/clientTypes.ts";
import { base64UrlDecode } from "../../../protocol/base64.ts";
import type { ChannelVoucherResult } from "../../../protocol/channels.ts";
import type { ChannelVoucher } from "../../../protocol/channelVoucher.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Store } from "../../../store/store.ts";
import { readChainChannel, signatureHex, verifyChannelVoucher } from "./channelChain.ts";
import { toChannelError } from "./channelErrors.ts";
import { type ChannelRow, findChannel, storeVoucher, upsertChannel } from "./channelRecords.ts";
import { servedTokenOf } from "./servedToken.ts";

export type ChannelVoucherIntakeContext = {
  store: Store;
  publicClient: ReadClient;
  chainId: number;
  contract: Address;
  /** The tokens served: a channel in any other never becomes a row (servedToken.ts). */
  tokens: readonly { address: Address }[];
  clock: Clock;
  sessionKey(x: Hex, y: Hex): KeyObject | undefined;
};

/** `refresh` found the channel, in a token not served here. */
const UNSERVED = "unserved";

const whereOf = (ctx: ChannelVoucherIntakeContext) => ({ chainId: ctx.chainId, contract: ctx.contract });

/** The highest verified voucher per channel of a handover, and the index of the result that carries it. */
type Best = Map<string, { amount: bigint; signature: Hex; index: number }>;

async function refresh(
  ctx: ChannelVoucherIntakeContext,
  channelId: Hex,
): Promise<ChannelRow | typeof UNSERVED | undefined> {
  const chain = await readChainChannel(ctx.publicClient, whereOf(ctx), channelId).catch((e: unknown) => {
    throw toChannelError(e);
  });
  if (chain === undefined) return undefined;
  if (servedTokenOf(ctx.tokens, chain) === undefined) return UNSERVED;
  return upsertChannel(ctx.store, chain);
}

/**
 * Checks one voucher against the stored channel and the vouchers checked before it in the same
 * handover (`pending`, the highest verified amount per channel). `store` means it passed every check.
 */
async function check(
  ctx: ChannelVoucherIntakeContext,
  payee: Address,
  v: ChannelVoucher,
  pending: ReadonlyMap<string, bigint>,
): Promise<{ result: ChannelVoucherResult; store?: { amount: bigint; signature: Hex } }> {
  const channelId = v.channelId.toLowerCase() as Hex;
  const amount = BigInt(v.cumulativeAmount);
  const reject = (reason: string) => ({ result: { channelId, status: "rejected" as const, reason } });
  const ignored = { result: { channelId, status: "ignored" as const } };
  const found = (await findChannel(ctx.store, channelId)) ?? (await refresh(ctx, channelId));
  if (found === undefined) return reject("no such channel");
  if (found === UNSERVED || servedTokenOf(ctx.tokens, found) === undefined) {
    // A fake token's channel (its events name a payer who signed nothing): never claimed from here.
    return reject("the channel's token is not one this facilitator serves");
  }
  let row = found;
  if (getAddress(row.payee) !== getAddress(payee)) return reject("not a channel of this provider");
  if (amount <= row.voucher_amount || amount <= row.claimed) return ignored;
  if (amount <= (pending.get(channelId) ?? 0n)) return ignored;
  if (row.closed) return reject("channel is closed");
  // The cooperative close the payee asked for carries the voucher held when it asked (its gate sealed
  // the channel and handed its last one over first): a later one would be held but never claimed.
  if (row.close_wanted) return reject("channel is being closed cooperatively");
  if (amount > row.deposit) {
    const again = await refresh(ctx, channelId);
    if (again !== undefined && again !== UNSERVED) row = again;
    if (amount > row.deposit) return reject("cumulative amount is above the deposit");
  }
  const key = ctx.sessionKey(row.session_key_x as Hex, row.session_key_y as Hex);
  let signature: Uint8Array;
  try {
    signature = base64UrlDecode(v.signature);
  } catch {
    return reject("signature is not base64url");
  }
  if (key === undefined || !verifyChannelVoucher(key, whereOf(ctx), channelId, amount, signature)) {
    return reject("signature is not the channel's session key");
  }
  return { result: { channelId, status: "stored" }, store: { amount, signature: signatureHex(signature) } };
}

/** Checks each voucher in order; an earlier verified voucher of a channel is overtaken by a later one. */
async function checkAll(
  ctx: ChannelVoucherIntakeContext,
  payee: Address,
  vouchers: readonly ChannelVoucher[],
): Promise<{ results: ChannelVoucherResult[]; best: Best }> {
  const results: ChannelVoucherResult[] = [];
  const best: Best = new Map();
  const pending = new Map<string, bigint>();
  for (const v of vouchers) {
    const { result, store } = await check(ctx, payee, v, pending);
    if (store !== undefined) {
      const earlier = best.get(result.channelId);
      // An earlier voucher of the same handover is overtaken: the channel keeps only the latest.
      if (earlier !== undefined) results[earlier.index] = { channelId: result.channelId, status: "ignored" };
      best.set(result.channelId, { ...store, index: results.length });
      pending.set(result.channelId, store.amount);
    }
    results.push(result);
  }
  return { results, best };
}

/** Stores the best vouchers in one transaction, in channel order; returns the channels it raised. */
async function storeBest(ctx: ChannelVoucherIntakeContext, best: Best): Promise<Set<string>> {
  const now = new Date(ctx.clock.now());
  // In channel order, so two handovers touching the same channels lock them in the same order.
  const ordered = [...best.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return ctx.store.transaction(async (db) => {
    const stored = new Set<string>();
    for (const [channelId, v] of ordered) {
      if (await storeVoucher(db, channelId as Hex, v.amount, v.signature, now)) stored.add(channelId);
    }
    return stored;
  });
}

export function createChannelVoucherIntake(ctx: ChannelVoucherIntakeContext) {
  return {
    /**
     * Checks each voucher, in order, then keeps the highest verified one per channel in one store
     * transaction: the claim worker sees a handover whole or not at all, so a claim never takes part of
     * it and leaves the rest under the threshold. One result per voucher.
     */
    async accept(payee: Address, vouchers: readonly ChannelVoucher[]): Promise<ChannelVoucherResult[]> {
      const { results, best } = await checkAll(ctx, payee, vouchers);
      if (best.size === 0) return results;
      const kept = await storeBest(ctx, best);
      // A concurrent handover may have stored a higher voucher meanwhile: this one changed nothing.
      for (const [channelId, v] of best) {
        if (!kept.has(channelId)) results[v.index] = { channelId: channelId as Hex, status: "ignored" };
      }
      return results;
    },
  };
}

export type ChannelVoucherIntake = ReturnType<typeof createChannelVoucherIntake>;
