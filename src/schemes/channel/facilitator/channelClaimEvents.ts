/**
 * The channel events the facilitator announces: `channel.opened` (from a relayed open, or from the contract's
 * log when the instance that relayed it died first), `channel.claimed`, `channel.claim_failed`, `channel.closed`.
 */
import { type Address, getAddress, type Hex } from "viem";
import type { OutboxOutcome } from "../../../facilitator/outbox/outboxTypes.ts";
import type { Queryable } from "../../../store/store.ts";
import { announcedAmount, recordClaimItem } from "./channelClaimReorg.ts";
import type { ChannelClaimWorkerContext } from "./channelClaimTypes.ts";
import {
  type ChainChannel,
  type ChannelRow,
  recordOpenTransaction,
  upsertChannel,
} from "./channelRecords.ts";

type EventContext = Pick<ChannelClaimWorkerContext, "recordEvent">;
type EventRow = Pick<ChannelRow, "channel_id" | "payer" | "payee" | "token">;

/**
 * Records a channel open on chain and announces it with `channel.opened`, once: only the call that records
 * its transaction announces it, whether that is the relaying request, a retry of it, or the log follower.
 * `nonce` is the open authorization's (unknown to the log follower, which then leaves it unset).
 */
export async function recordOpened(
  ctx: EventContext,
  db: Queryable,
  chain: ChainChannel,
  nonce: Hex | null,
  transaction: Hex,
): Promise<boolean> {
  await upsertChannel(db, chain);
  if (!(await recordOpenTransaction(db, chain.channelId, nonce, transaction))) return false;
  await ctx.recordEvent(db, "channel.opened", {
    provider: chain.payee.toLowerCase(),
    channelId: chain.channelId,
    payer: getAddress(chain.payer),
    payee: getAddress(chain.payee),
    token: getAddress(chain.token),
    deposit: chain.deposit.toString(),
    closeDelay: chain.closeDelay,
    transaction,
  });
  return true;
}

/**
 * Records what a claim's receipt says it paid on a channel and announces it with `channel.claimed`,
 * less what an earlier event announced (a claim sent again after a reorganisation; channelClaimReorg.ts).
 */
export async function recordPaid(
  ctx: EventContext,
  db: Queryable,
  row: EventRow,
  item: { cumulativeAmount: bigint; amount: bigint },
  outcome: OutboxOutcome,
) {
  const paid = {
    claimedBefore: item.cumulativeAmount - item.amount,
    cumulativeAmount: item.cumulativeAmount,
  };
  await recordClaimItem(db, outcome.id, row.channel_id as Hex, paid);
  const announced = await announcedAmount(db, row.channel_id as Hex, paid);
  if (announced === 0n) return;
  await ctx.recordEvent(db, "channel.claimed", {
    provider: row.payee,
    channelId: row.channel_id,
    payer: getAddress(row.payer),
    payee: getAddress(row.payee),
    token: getAddress(row.token),
    cumulativeAmount: item.cumulativeAmount.toString(),
    amount: announced.toString(),
    transaction: outcome.status === "confirmed" ? outcome.hash : null,
  });
}

/** Tells the payee its claim is held: the token's issuer blacklisted it. */
export async function recordPayeeBlacklisted(
  ctx: EventContext,
  db: Queryable,
  row: EventRow & Pick<ChannelRow, "voucher_amount">,
  outcome: OutboxOutcome,
) {
  await ctx.recordEvent(db, "channel.claim_failed", {
    provider: row.payee,
    channelId: row.channel_id,
    payer: getAddress(row.payer),
    payee: getAddress(row.payee),
    token: getAddress(row.token),
    cumulativeAmount: row.voucher_amount.toString(),
    code: "AccountBlacklisted",
    message: `the token's issuer has blacklisted the payee ${getAddress(row.payee)}; the token refuses to pay it`,
    account: getAddress(row.payee),
    role: "payee",
    transaction: outcome.status === "confirmed" ? outcome.hash : null,
  });
}

export async function recordClosed(
  ctx: EventContext,
  db: Queryable,
  row: EventRow,
  claimed: bigint,
  refunded: bigint,
  transaction: Hex | null,
  by: Address,
) {
  await ctx.recordEvent(db, "channel.closed", {
    provider: row.payee,
    channelId: row.channel_id,
    payer: getAddress(row.payer),
    payee: getAddress(row.payee),
    token: getAddress(row.token),
    claimed: claimed.toString(),
    refunded: refunded.toString(),
    /** Who sent the closing transaction: the payee or its operator, or anyone withdrawing for the payer. */
    by: getAddress(by),
    transaction,
  });
}
