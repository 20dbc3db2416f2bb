/**
 * Moving a channel's deposit after the open (docs/channels.md, "The facilitator"):
 * - `POST /channels/:id/top-up`: the payer's EIP-3009 ReceiveWithAuthorization (nonce
 *   `topUpNonce(channelId, salt)`), relayed gasless. Checked cheapest first like an open: the amount's
 *   minimum and the validity window (no I/O), the channel on chain (exists, open, not asked to close, a
 *   served token), the payer's signature (recovered locally; a payer with code is left to the token's
 *   ERC-1271 check in the simulation), the payer's rate limit, the authorization not yet used, the
 *   payer's balance, a simulation; then one transaction through the outbox. Idempotent on the
 *   authorization: a resend (also concurrent, or after a crash) answers the channel as it is now.
 * - `POST /channels/:id/withdraw`: the payer's unilateral withdrawal after the close delay, relayed for
 *   anyone (the money only goes to the payer). A channel whose payee's vouchers this facilitator still has
 *   to claim is claimed first (the answer says to retry), so relaying a withdrawal never costs a seller
 *   a voucher it handed over. A closed channel answers with what it paid and refunded.
 *
 * Attacker's view: both routes send a transaction only after a passing simulation, so a refused call
 * costs an `eth_call` or two under the per-client rate limit and the per-payer bucket. A top-up is at
 * least the channel minimum deposit, so gas spent per value moved is bounded like an open's. A withdrawal
 * is sent at most once per channel (it closes it; a repeat is answered from the chain).
 */

import { type Address, getAddress, type Hash, type Hex, type PublicClient } from "viem";
import { channelCallForRelay } from "../../../chain/actions/channels/channelCallForRelay.ts";
import { computeChannelTopUpNonce } from "../../../chain/actions/channels/channelHashes.ts";
import { getAuthorizationState } from "../../../chain/actions/usd/getAuthorizationState.ts";
import type { FacilitatorToken } from "../../../facilitator/facilitatorToken.ts";
import type { GasAccount } from "../../../facilitator/gasAccount.ts";
import type {
  ChannelTopUpRequest,
  ChannelTopUpResponse,
  ChannelWithdrawResponse,
} from "../../../protocol/channels.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import { channelToWire, readKnownChannel } from "./channelChain.ts";
import { toChannelError } from "./channelErrors.ts";
import { type ChainChannel, findChannel, markClosed, upsertChannel } from "./channelRecords.ts";
import {
  checkAuthorizationWindow,
  checkPayerBalance,
  checkReceiveAuthorization,
} from "./checkReceiveAuthorization.ts";
import { requireServedToken } from "./servedToken.ts";

export type ChannelFundsContext = {
  store: Store;
  publicClient: Pick<PublicClient, "readContract" | "simulateContract" | "getCode">;
  gas: Pick<GasAccount, "address" | "sendAndWait">;
  network: `eip155:${number}`;
  chainId: number;
  contract: Address;
  tokens: readonly FacilitatorToken[];
  clock: Clock;
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
  /** The smallest top-up relayed, per token (smallest unit). */
  minTopUp(token: FacilitatorToken): bigint;
  /** Seconds a top-up's authorization must still be valid for when it arrives. */
  minRemainingSeconds: number;
  takePayer(payer: Address): void;
  /** The claim worker: run a round now. */
  signalWorker(): void;
};

type TopUpResult = { status: 200 | 201; body: ChannelTopUpResponse };
type RelayCall = ReturnType<typeof channelCallForRelay>;

const chain = (ctx: ChannelFundsContext, channelId: Hex): Promise<ChainChannel> =>
  readKnownChannel(ctx.publicClient, { chainId: ctx.chainId, contract: ctx.contract }, channelId);

const wire = (
  ctx: ChannelFundsContext,
  channelId: Hex,
  c: ChainChannel,
  tx?: Hash,
): ChannelTopUpResponse => ({
  channelId,
  ...(tx === undefined ? {} : { transaction: tx }),
  channel: channelToWire(c, ctx.network),
});

/**
 * The checks before relaying a top-up, in order: served token, minimum, the payer's signature, then
 * (the answer when this very authorization already landed) the channel open and not closing, the
 * payer's rate limit and balance.
 */
async function checkTopUp(
  ctx: ChannelFundsContext,
  channelId: Hex,
  c: ChainChannel,
  req: ChannelTopUpRequest,
  nonce: Hex,
  used: () => Promise<boolean>,
): Promise<TopUpResult | undefined> {
  const token = requireServedToken(ctx.tokens, c);
  const minimum = ctx.minTopUp(token);
  if (BigInt(req.amount) < minimum) {
    throw new TollgateError("AmountMismatch", `a channel top-up must be at least ${minimum}`, {
      details: { reason: "top_up_below_minimum", amount: req.amount, minimum: minimum.toString() },
    });
  }
  await checkReceiveAuthorization(ctx.publicClient, {
    chainId: ctx.chainId,
    token,
    payer: c.payer,
    to: ctx.contract,
    nonce,
    auth: req,
    refusal: "the top-up is not signed by the channel's payer for this channel",
  });
  // A resend of a top-up that landed: the channel as it is now (also once it closed).
  if (await used()) return { status: 200, body: wire(ctx, channelId, c) };
  if (c.closed) throw new TollgateError("InvalidRequest", "the channel is closed");
  if (c.closeRequestedAt > 0) {
    throw new TollgateError(
      "ChannelClosing",
      "the payer asked to close this channel: it takes no more deposit",
      {
        details: { closableAt: c.closeRequestedAt + c.closeDelay },
      },
    );
  }
  ctx.takePayer(c.payer);
  await checkPayerBalance(ctx.publicClient, {
    token: c.token,
    payer: c.payer,
    amount: req.amount,
    refusal: "the payer's balance does not cover the top-up",
  });
  return undefined;
}

/** Simulates and sends a checked top-up, then records the channel as it is after it. */
async function sendTopUp(
  ctx: ChannelFundsContext,
  channelId: Hex,
  req: ChannelTopUpRequest,
  used: () => Promise<boolean>,
): Promise<TopUpResult> {
  const args = [
    channelId,
    BigInt(req.amount),
    req.salt,
    BigInt(req.validAfter),
    BigInt(req.validBefore),
    req.signature,
  ] as const;
  const call = channelCallForRelay({
    channels: ctx.contract,
    functionName: "topUpWithAuthorization",
    args,
  });
  try {
    await ctx.publicClient.simulateContract({ ...call.simulation, account: ctx.gas.address } as never);
  } catch (error) {
    const refused = toChannelError(error);
    // Another instance relayed this very authorization meanwhile.
    if (await used().catch(() => false))
      return { status: 200, body: wire(ctx, channelId, await chain(ctx, channelId)) };
    throw refused;
  }
  let sent: { hash: Hash };
  try {
    sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
  } catch (error) {
    if (await used().catch(() => false))
      return { status: 200, body: wire(ctx, channelId, await chain(ctx, channelId)) };
    throw toChannelError(error);
  }
  const after = await chain(ctx, channelId);
  // No webhook event of its own: the payee sees the deposit in `GET /channels/:id` and its gate
  // re-reads the channel when a voucher exceeds the deposit it knew.
  await upsertChannel(ctx.store, after);
  return { status: 201, body: wire(ctx, channelId, after, sent.hash) };
}

async function relayTopUp(
  ctx: ChannelFundsContext,
  channelId: Hex,
  req: ChannelTopUpRequest,
  nonce: Hex,
): Promise<TopUpResult> {
  const c = await chain(ctx, channelId);
  const used = () =>
    getAuthorizationState(ctx.publicClient, { token: c.token, authorizer: c.payer, nonce }).catch(
      (e: unknown) => {
        throw toChannelError(e);
      },
    );
  const early = await checkTopUp(ctx, channelId, c, req, nonce, used);
  if (early !== undefined) return early;
  return sendTopUp(ctx, channelId, req, used);
}

const closedAnswer = (channelId: Hex, c: ChainChannel, tx?: Hash): ChannelWithdrawResponse => ({
  channelId,
  ...(tx === undefined ? {} : { transaction: tx }),
  claimed: c.claimed.toString(),
  refunded: (c.deposit - c.claimed).toString(),
});

/**
 * Simulates the withdrawal: refused with `retryAfter` before the close delay is over; the answer when
 * the channel closed meanwhile.
 */
async function simulateWithdraw(
  ctx: ChannelFundsContext,
  channelId: Hex,
  call: RelayCall,
  closableAt: number,
): Promise<ChannelWithdrawResponse | undefined> {
  try {
    await ctx.publicClient.simulateContract({ ...call.simulation, account: ctx.gas.address } as never);
  } catch (error) {
    const refused = toChannelError(error);
    if (refused.details?.revert === "CloseDelayNotOver") {
      const wait = Math.max(1, closableAt - Math.floor(ctx.clock.now() / 1000));
      throw new TollgateError("InvalidRequest", "the close delay is not over yet", {
        retryAfter: wait,
        details: { reason: "close_delay_not_over", closableAt },
      });
    }
    const now = await chain(ctx, channelId);
    if (now.closed) return closedAnswer(channelId, now);
    throw refused;
  }
  return undefined;
}

/** Refuses (for now) a withdrawal while the seller's latest voucher is unclaimed, and has it claimed. */
async function requireClaimedFirst(ctx: ChannelFundsContext, channelId: Hex, c: ChainChannel) {
  const row = await findChannel(ctx.store, channelId);
  if (row !== undefined && row.voucher_amount > c.claimed && row.claim_error !== "NotOperator") {
    // The seller's latest voucher is here and not yet claimed: claim it before the payer takes the rest.
    ctx.signalWorker();
    throw new TollgateError("ChainUnavailable", "the payee's vouchers are being claimed first; try again", {
      retryAfter: 5,
      details: { reason: "claim_pending" },
    });
  }
}

/** Records the channel the withdrawal closed (once) with its `channel.closed` event. */
async function recordWithdrawn(
  ctx: ChannelFundsContext,
  channelId: Hex,
  c: ChainChannel,
  hash: Hash,
): Promise<ChannelWithdrawResponse> {
  const after = await chain(ctx, channelId);
  await ctx.store.transaction(async (db) => {
    // Known here before the close (the state read before sending), so the close is recorded once.
    await upsertChannel(db, c);
    if (await markClosed(db, channelId, after.claimed)) {
      await ctx.recordEvent(db, "channel.closed", {
        provider: after.payee.toLowerCase(),
        channelId,
        payer: getAddress(after.payer),
        payee: getAddress(after.payee),
        token: getAddress(after.token),
        claimed: after.claimed.toString(),
        refunded: (after.deposit - after.claimed).toString(),
        by: getAddress(ctx.gas.address),
        transaction: hash,
      });
    }
  });
  return closedAnswer(channelId, after, hash);
}

async function relayWithdraw(ctx: ChannelFundsContext, channelId: Hex): Promise<ChannelWithdrawResponse> {
  const c = await chain(ctx, channelId);
  requireServedToken(ctx.tokens, c);
  if (c.closed) return closedAnswer(channelId, c);
  if (c.closeRequestedAt === 0) {
    throw new TollgateError("InvalidRequest", "the payer has not asked to close this channel", {
      details: { reason: "close_not_requested" },
    });
  }
  const closableAt = c.closeRequestedAt + c.closeDelay;
  ctx.takePayer(c.payer);
  const call = channelCallForRelay({ channels: ctx.contract, functionName: "withdraw", args: [channelId] });
  const closed = await simulateWithdraw(ctx, channelId, call, closableAt);
  if (closed !== undefined) return closed;
  await requireClaimedFirst(ctx, channelId, c);
  let sent: { hash: Hash };
  try {
    sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
  } catch (error) {
    const now = await chain(ctx, channelId);
    if (now.closed) return closedAnswer(channelId, now);
    throw toChannelError(error);
  }
  return recordWithdrawn(ctx, channelId, c, sent.hash);
}

export function createChannelFundsService(ctx: ChannelFundsContext) {
  const flights = new Map<string, Promise<TopUpResult>>();
  const withdrawals = new Map<string, Promise<ChannelWithdrawResponse>>();

  return {
    async topUp(channelId: Hex, req: ChannelTopUpRequest): Promise<TopUpResult> {
      checkAuthorizationWindow(ctx.clock, ctx.minRemainingSeconds, req);
      const nonce = computeChannelTopUpNonce({
        chainId: ctx.chainId,
        channels: ctx.contract,
        channelId,
        salt: req.salt,
      });
      const key = `${channelId}|${nonce}`;
      const running = flights.get(key);
      if (running !== undefined) return running.then((r) => ({ ...r, status: 200 as const }));
      const flight = relayTopUp(ctx, channelId, req, nonce).finally(() => flights.delete(key));
      flights.set(key, flight);
      return flight;
    },
    /** Relays the payer's withdrawal once its close delay is over (one flight per channel per process). */
    withdraw(channelId: Hex): Promise<ChannelWithdrawResponse> {
      const running = withdrawals.get(channelId);
      if (running !== undefined) return running;
      const flight = relayWithdraw(ctx, channelId).finally(() => withdrawals.delete(channelId));
      withdrawals.set(channelId, flight);
      return flight;
    },
  };
}

export type ChannelFundsService = ReturnType<typeof createChannelFundsService>;
