/**
 * Opens a payer's channel: signs the open with a fresh session key, asks `approveDeposit`, stores the
 * record (with its key) as `opening`, then asks the facilitator to relay it. One open in flight per terms.
 *
 * Invariants:
 * - Nothing is stored or sent before `approveDeposit` agreed; the key is stored before the open leaves,
 *   so a payer that dies meanwhile still holds the channel's key.
 * - An open the facilitator refused for good (4xx but `RateLimited`) is recorded `closed`: its
 *   authorization never moved money. A fault leaves it `opening` for `refresh` to find out.
 */
import type { Hex } from "viem";
import { signChannelOpen } from "../../../chain/actions/channels/signChannelOpen.ts";
import { ChannelOpenResponseSchema } from "../../../protocol/channels.ts";
import { unixSeconds } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import { type Live, termsKey } from "./channelBook.ts";
import { channelDepositFor } from "./channelDeposit.ts";
import type { ChannelWalletContext } from "./channelWalletContext.ts";
import type { ChannelRecord } from "./channelWalletStore.ts";
import type { ChannelTermsInput } from "./channelWalletTypes.ts";
import { closeDelayRefusal, DEFAULT_MAX_CHANNEL_CLOSE_DELAY } from "./closeDelayBound.ts";
import { createSessionKey, exportSessionKey, type SessionKey } from "./sessionKey.ts";

/** An open signed by the payer's wallet and approved by its budget, not yet stored or sent. */
type SignedOpen = {
  channelId: Hex;
  amount: bigint;
  key: SessionKey;
  tag: Hex | undefined;
  salt: Hex;
  closeDelay: number;
  validBefore: bigint;
  signature: Hex;
};

export type ChannelOpener = {
  /** Opens a channel on `terms`, or joins the open already in flight for them. */
  openOnce(terms: ChannelTermsInput, calls: number | undefined): Promise<Live>;
  /** The open in flight for these terms, if any. */
  inFlight(terms: ChannelTermsInput): Promise<Live> | undefined;
};

/** Checks the terms, signs the open with a fresh session key and asks `approveDeposit`. */
async function signOpen(
  ctx: ChannelWalletContext,
  terms: ChannelTermsInput,
  calls: number | undefined,
): Promise<SignedOpen> {
  if (terms.network !== ctx.options.network) {
    throw new TollgateError("UnsupportedNetwork", "the channel is on another network than the payer");
  }
  const refusal = closeDelayRefusal(terms, ctx.options.maxCloseDelay ?? DEFAULT_MAX_CHANNEL_CLOSE_DELAY);
  if (refusal !== undefined) throw refusal;
  const amount = channelDepositFor(ctx.options, terms, calls);
  const key = createSessionKey();
  // The gate's tag first (the contract keeps the salt's first 8 bytes): only that gate's store serves it.
  const tag = terms.tag?.toLowerCase() as Hex | undefined;
  const salt =
    `0x${tag === undefined ? "" : tag.slice(2)}${Buffer.from(ctx.random(tag === undefined ? 32 : 24)).toString("hex")}` as Hex;
  const closeDelay = Math.max(ctx.options.closeDelay ?? 3_600, terms.minCloseDelay);
  const now = unixSeconds(ctx.clock);
  const validBefore = BigInt(now + 600);
  const signed = await signChannelOpen(ctx.options.account, {
    chainId: ctx.chainId,
    channels: terms.contract,
    tokenDomain: await ctx.tokenDomainOf(terms.token),
    payee: terms.payee,
    amount,
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay: BigInt(closeDelay),
    salt,
    validAfter: 0n,
    validBefore,
  });
  const channelId = signed.channelId.toLowerCase() as Hex;
  await ctx.options.approveDeposit?.(amount, terms, channelId);
  return { channelId, amount, key, tag, salt, closeDelay, validBefore, signature: signed.signature };
}
/** The record of a signed open, `opening` until the facilitator confirms it. */
function openingRecord(ctx: ChannelWalletContext, terms: ChannelTermsInput, s: SignedOpen): ChannelRecord {
  const closeRoute = ctx.routes.closeRouteOf(terms);
  return {
    channelId: s.channelId,
    network: ctx.options.network,
    contract: terms.contract,
    facilitator: terms.facilitator,
    payer: ctx.options.account.address,
    payee: terms.payee,
    token: terms.token,
    deposit: s.amount,
    signed: 0n,
    owed: 0n,
    closeDelay: s.closeDelay,
    salt: s.salt,
    ...(s.tag === undefined ? {} : { tag: s.tag }),
    sessionKey: exportSessionKey(s.key),
    status: "opening",
    openValidBefore: Number(s.validBefore),
    ...(closeRoute === undefined ? {} : { closeRoute }),
  };
}
/** Asks the facilitator to relay a stored open; a refusal for good records it `closed`. */
async function relayOpen(
  ctx: ChannelWalletContext,
  entry: Live,
  terms: ChannelTermsInput,
  s: SignedOpen,
): Promise<Live> {
  try {
    const reply = await ctx.options.facilitator.request("POST", "/channels", ChannelOpenResponseSchema, {
      body: {
        network: ctx.options.network,
        contract: terms.contract,
        token: terms.token,
        payer: ctx.options.account.address,
        payee: terms.payee,
        amount: s.amount.toString(),
        sessionKeyX: s.key.x,
        sessionKeyY: s.key.y,
        closeDelay: s.closeDelay,
        salt: s.salt,
        validAfter: "0",
        validBefore: s.validBefore.toString(),
        signature: s.signature,
      },
    });
    if (reply.channelId.toLowerCase() !== entry.record.channelId) {
      throw new TollgateError("InvalidRequest", "the facilitator opened another channel than the one signed");
    }
    ctx.book.put(entry, { status: "open", deposit: BigInt(reply.channel.deposit) });
    ctx.book.funded.set(entry.record.channelId, s.amount);
    return entry;
  } catch (error) {
    // Refused for good (bad terms, funds): the authorization never moved money. A fault may have
    // opened it anyway: `refresh` finds out, and the record keeps the key meanwhile.
    if (isTollgateError(error) && error.status < 500 && error.code !== "RateLimited")
      ctx.book.put(entry, { status: "closed" });
    throw error;
  }
}
/** Opens a channel: signed, approved, stored with its key, then relayed. */
async function open(
  ctx: ChannelWalletContext,
  terms: ChannelTermsInput,
  calls: number | undefined,
): Promise<Live> {
  const s = await signOpen(ctx, terms, calls);
  const record = openingRecord(ctx, terms, s);
  // The key is stored before the open leaves: a payer that dies now still holds the channel's key.
  ctx.store.put(record);
  const entry = ctx.book.track(record);
  return relayOpen(ctx, entry, terms, s);
}
export function createChannelOpener(ctx: ChannelWalletContext): ChannelOpener {
  const opening = new Map<string, Promise<Live>>();

  function openOnce(terms: ChannelTermsInput, calls: number | undefined): Promise<Live> {
    const k = termsKey(terms);
    let pending = opening.get(k);
    if (pending === undefined) {
      pending = open(ctx, terms, calls).finally(() => opening.delete(k));
      opening.set(k, pending);
    }
    return pending;
  }

  return { openOnce, inFlight: (terms) => opening.get(termsKey(terms)) };
}
