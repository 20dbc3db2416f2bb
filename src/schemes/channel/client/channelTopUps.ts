/**
 * Tops a payer's channels up: on demand (`topUp`), and in the background once a channel runs low, sized
 * like its last funding (or the payer's forecast). A top-up refused for any reason opens the next channel
 * instead. One top-up in flight per channel.
 *
 * Invariants:
 * - A top-up is asked of `approveTopUp` after it is signed and before it leaves the process.
 * - A top-up below the gate's minimum deposit is refused before anything is signed or held.
 * - No background renewal while an open for the same terms or a top-up of the channel is in flight, or
 *   while another open channel on the terms has more room.
 */
import type { Hex } from "viem";
import { signChannelTopUp } from "../../../chain/actions/channels/signChannelTopUp.ts";
import { ChannelTopUpResponseSchema } from "../../../protocol/channels.ts";
import { unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { type Live, roomOf } from "./channelBook.ts";
import { channelDepositFor } from "./channelDeposit.ts";
import type { ChannelOpener } from "./channelOpener.ts";
import type { ChannelWalletContext } from "./channelWalletContext.ts";
import type { ChannelRecord } from "./channelWalletStore.ts";
import type { ChannelTermsInput } from "./channelWalletTypes.ts";

export type ChannelTopUps = {
  /** Adds `amount` to an open channel's deposit (`terms` the gate's, when known). */
  topUp(entry: Live, terms: ChannelTermsInput | undefined, amount: bigint): Promise<void>;
  /** Tops this channel up (or opens the next one) in the background once it is running low. */
  renewIfLow(entry: Live, terms: ChannelTermsInput): void;
  /** A top-up in flight for a channel on these terms (to wait for instead of opening another). */
  pending(terms: ChannelTermsInput): Promise<void> | undefined;
};

/** Terms for a channel whose gate's terms are unknown: its own, at no price or minimum. */
const termsOfRecord = (r: ChannelRecord): ChannelTermsInput => ({
  network: r.network,
  contract: r.contract,
  facilitator: r.facilitator,
  payee: r.payee,
  token: r.token,
  price: 0n,
  minDeposit: 0n,
  minCloseDelay: r.closeDelay,
  tag: r.tag,
});

/** What background renewals share: the wallet, its opener, the threshold and the top-ups in flight. */
type TopUpState = {
  ctx: ChannelWalletContext;
  opener: ChannelOpener;
  renewBelow: number;
  /** Top-ups in flight, per channel. */
  toppingUp: Map<string, Promise<void>>;
};

/** Signs a top-up, asks `approveTopUp`, and has the facilitator relay it. */
async function topUp(
  ctx: ChannelWalletContext,
  entry: Live,
  terms: ChannelTermsInput | undefined,
  amount: bigint,
) {
  const r = entry.record;
  if (r.status !== "open") throw new TollgateError("ChannelClosing", "the channel is not open");
  // The gate's minimum deposit bounds a top-up as it bounds an open (the facilitator refuses less, after
  // the budget would already have grown the hold): refused here, before anything is signed or held.
  const minimum = (terms ?? ctx.routes.knownTerms(r))?.minDeposit ?? 0n;
  if (amount < minimum || amount <= 0n) {
    throw new TollgateError("AmountMismatch", `a top-up of this channel must be at least ${minimum}`, {
      details: { reason: "top_up_below_minimum", amount: amount.toString(), minimum: minimum.toString() },
    });
  }
  const t: ChannelTermsInput = terms ?? termsOfRecord(r);
  const salt = `0x${Buffer.from(ctx.random(32)).toString("hex")}` as Hex;
  const validBefore = BigInt(unixSeconds(ctx.clock) + 600);
  const signed = await signChannelTopUp(ctx.options.account, {
    chainId: ctx.chainId,
    channels: r.contract,
    tokenDomain: await ctx.tokenDomainOf(r.token),
    channelId: r.channelId,
    amount,
    salt,
    validAfter: 0n,
    validBefore,
  });
  await ctx.options.approveTopUp?.(amount, t, r.channelId);
  const reply = await ctx.options.facilitator.request(
    "POST",
    `/channels/${r.channelId}/top-up`,
    ChannelTopUpResponseSchema,
    {
      body: {
        amount: amount.toString(),
        salt,
        validAfter: "0",
        validBefore: validBefore.toString(),
        signature: signed.signature,
      },
    },
  );
  const deposit = BigInt(reply.channel.deposit);
  if (deposit > entry.record.deposit) ctx.book.put(entry, { deposit });
  ctx.book.funded.set(r.channelId, amount);
}
/** Tops this channel up (or opens the next one) in the background once it is running low. */
function renewIfLow(state: TopUpState, entry: Live, terms: ChannelTermsInput) {
  const { ctx, opener, toppingUp } = state;
  const r = entry.record;
  const size = ctx.book.funded.get(r.channelId) ?? r.deposit;
  if (Number(roomOf(r)) >= Number(size) * state.renewBelow && roomOf(r) >= terms.price * 2n) return;
  if (opener.inFlight(terms) !== undefined || toppingUp.has(r.channelId)) return;
  const others = ctx.book
    .onTerms(terms)
    .filter((e) => e !== entry && e.record.status === "open" && roomOf(e.record) > roomOf(r));
  if (others.length > 0) return;
  // Sized by the payer's policy (its forecast) when it has one, else like the last funding.
  const planned = typeof ctx.options.calls === "function" ? ctx.options.calls(terms) : undefined;
  const calls = planned ?? Number(size / terms.price);
  const renewByOpen = () => {
    opener.openOnce(terms, calls).catch(() => {});
  };
  if (ctx.options.topUp === false || r.status !== "open") {
    renewByOpen();
    return;
  }
  let amount: bigint;
  try {
    amount = channelDepositFor(ctx.options, terms, calls);
  } catch {
    return;
  }
  const pending = topUp(ctx, entry, terms, amount)
    .catch(() => {
      // Refused by the budget, the facilitator (or one without the route), or the channel is closing:
      // the next channel is opened instead, as before top-ups.
      renewByOpen();
    })
    .finally(() => toppingUp.delete(r.channelId));
  toppingUp.set(r.channelId, pending);
}
export function createChannelTopUps(
  ctx: ChannelWalletContext,
  opener: ChannelOpener,
  renewBelow: number,
): ChannelTopUps {
  const state: TopUpState = { ctx, opener, renewBelow, toppingUp: new Map() };

  function pending(terms: ChannelTermsInput): Promise<void> | undefined {
    for (const e of ctx.book.onTerms(terms)) {
      const inFlight = state.toppingUp.get(e.record.channelId);
      if (inFlight !== undefined) return inFlight;
    }
    return undefined;
  }

  return {
    topUp: (entry, terms, amount) => topUp(ctx, entry, terms, amount),
    renewIfLow: (entry, terms) => renewIfLow(state, entry, terms),
    pending,
  };
}
