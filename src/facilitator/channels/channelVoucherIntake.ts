/**
 * `POST /channels/vouchers` (the payee's provider API key): a gate hands over the latest voucher of each
 * of its channels, and the facilitator keeps the highest verified one per channel for the claim worker.
 *
 * Each voucher is checked as the contract will check it: the channel exists (read from the chain the
 * first time), it is this provider's (payee), it is open, the amount is within the deposit (re-read once
 * when above it: a top-up may have landed), and the session key signed it (P-256, node:crypto). A voucher
 * at or below the one held is `ignored` before any signature work, so resending is idempotent and cheap.
 * A rejected voucher changes nothing and says why; it never fails the others.
 */
import type { KeyObject } from "node:crypto";
import { type Address, getAddress, type Hex } from "viem";
import type { ReadClient } from "../../chain/clientTypes.ts";
import { base64UrlDecode } from "../../protocol/base64.ts";
import type { ChannelVoucherResult } from "../../protocol/channels.ts";
import type { ChannelVoucher } from "../../protocol/channelVoucher.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import { readChainChannel, signatureHex, verifyChannelVoucher } from "./channelChain.ts";
import { toChannelError } from "./channelErrors.ts";
import { type ChannelRow, findChannel, storeVoucher, upsertChannel } from "./channelRecords.ts";

export type ChannelVoucherIntakeContext = {
  store: Store;
  publicClient: ReadClient;
  chainId: number;
  contract: Address;
  clock: Clock;
  sessionKey(x: Hex, y: Hex): KeyObject | undefined;
};

export function createChannelVoucherIntake(ctx: ChannelVoucherIntakeContext) {
  const where = { chainId: ctx.chainId, contract: ctx.contract };

  async function refresh(channelId: Hex): Promise<ChannelRow | undefined> {
    const chain = await readChainChannel(ctx.publicClient, where, channelId).catch((e: unknown) => {
      throw toChannelError(e);
    });
    if (chain === undefined) return undefined;
    return upsertChannel(ctx.store, chain);
  }

  async function one(payee: Address, v: ChannelVoucher): Promise<ChannelVoucherResult> {
    const channelId = v.channelId.toLowerCase() as Hex;
    const amount = BigInt(v.cumulativeAmount);
    const reject = (reason: string): ChannelVoucherResult => ({ channelId, status: "rejected", reason });
    let row = (await findChannel(ctx.store, channelId)) ?? (await refresh(channelId));
    if (row === undefined) return reject("no such channel");
    if (getAddress(row.payee) !== getAddress(payee)) return reject("not a channel of this provider");
    if (amount <= row.voucher_amount || amount <= row.claimed) return { channelId, status: "ignored" };
    if (row.closed) return reject("channel is closed");
    if (amount > row.deposit) {
      row = (await refresh(channelId)) ?? row;
      if (amount > row.deposit) return reject("cumulative amount is above the deposit");
    }
    const key = ctx.sessionKey(row.session_key_x as Hex, row.session_key_y as Hex);
    let signature: Uint8Array;
    try {
      signature = base64UrlDecode(v.signature);
    } catch {
      return reject("signature is not base64url");
    }
    if (key === undefined || !verifyChannelVoucher(key, where, channelId, amount, signature)) {
      return reject("signature is not the channel's session key");
    }
    const stored = await storeVoucher(
      ctx.store,
      channelId,
      amount,
      signatureHex(signature),
      new Date(ctx.clock.now()),
    );
    return { channelId, status: stored ? "stored" : "ignored" };
  }

  return {
    /** Checks and keeps each voucher, in order; one result per voucher. */
    async accept(payee: Address, vouchers: readonly ChannelVoucher[]): Promise<ChannelVoucherResult[]> {
      const results: ChannelVoucherResult[] = [];
      for (const v of vouchers) results.push(await one(payee, v));
      return results;
    },
  };
}

export type ChannelVoucherIntake = ReturnType<typeof createChannelVoucherIntake>;
