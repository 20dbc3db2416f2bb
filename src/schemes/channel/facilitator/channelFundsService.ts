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

export function createChannelFundsService(ctx: ChannelFundsContext) {
  const where = { chainId: ctx.chainId, contract: ctx.contract };
  const flights = new Map<string, Promise<{ status: 200 | 201; body: ChannelTopUpResponse }>>();
  const withdrawals = new Map<string, Promise<ChannelWithdrawResponse>>();

  const chain = (channelId: Hex): Promise<ChainChannel> =>
    readKnownChannel(ctx.publicClient, where, channelId);

  const wire = (channelId: Hex, c: ChainChannel, tx?: Hash): ChannelTopUpResponse => ({
    channelId,
    ...(tx === undefined ? {} : { transaction: tx }),
    channel: channelToWire(c, ctx.network),
  });

  async function relayTopUp(
    channelId: Hex,
    req: ChannelTopUpRequest,
    nonce: Hex,
  ): Promise<{ status: 200 | 201; body: ChannelTopUpResponse }> {
    const c = await chain(channelId);
    const used = () =>
      getAuthorizationState(ctx.publicClient, { token: c.token, authorizer: c.payer, nonce }).catch(
        (e: unknown) => {
          throw toChannelError(e);
        },
      );
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
    if (await used()) return { status: 200, body: wire(channelId, c) };
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
        return { status: 200, body: wire(channelId, await chain(channelId)) };
      throw refused;
    }
    let sent: { hash: Hash };
    try {
      sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
    } catch (error) {
      if (await used().catch(() => false))
        return { status: 200, body: wire(channelId, await chain(channelId)) };
      throw toChannelError(error);
    }
    const after = await chain(channelId);
    // No webhook event of its own: the payee sees the deposit in `GET /channels/:id` and its gate
    // re-reads the channel when a voucher exceeds the deposit it knew.
    await upsertChannel(ctx.store, after);
    return { status: 201, body: wire(channelId, after, sent.hash) };
  }

  async function topUp(
    channelId: Hex,
    req: ChannelTopUpRequest,
  ): Promise<{ status: 200 | 201; body: ChannelTopUpResponse }> {
    checkAuthorizationWindow(ctx.clock, ctx.minRemainingSeconds, req);
    const nonce = computeChannelTopUpNonce({ ...where, channels: ctx.contract, channelId, salt: req.salt });
    const key = `${channelId}|${nonce}`;
    const running = flights.get(key);
    if (running !== undefined) return running.then((r) => ({ ...r, status: 200 as const }));
    const flight = relayTopUp(channelId, req, nonce).finally(() => flights.delete(key));
    flights.set(key, flight);
    return flight;
  }

  const closedAnswer = (channelId: Hex, c: ChainChannel, tx?: Hash): ChannelWithdrawResponse => ({
    channelId,
    ...(tx === undefined ? {} : { transaction: tx }),
    claimed: c.claimed.toString(),
    refunded: (c.deposit - c.claimed).toString(),
  });

  async function relayWithdraw(channelId: Hex): Promise<ChannelWithdrawResponse> {
    const c = await chain(channelId);
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
      const now = await chain(channelId);
      if (now.closed) return closedAnswer(channelId, now);
      throw refused;
    }
    const row = await findChannel(ctx.store, channelId);
    if (row !== undefined && row.voucher_amount > c.claimed && row.claim_error !== "NotOperator") {
      // The seller's latest voucher is here and not yet claimed: claim it before the payer takes the rest.
      ctx.signalWorker();
      throw new TollgateError("ChainUnavailable", "the payee's vouchers are being claimed first; try again", {
        retryAfter: 5,
        details: { reason: "claim_pending" },
      });
    }
    let sent: { hash: Hash };
    try {
      sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
    } catch (error) {
      const now = await chain(channelId);
      if (now.closed) return closedAnswer(channelId, now);
      throw toChannelError(error);
    }
    const after = await chain(channelId);
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
          transaction: sent.hash,
        });
      }
    });
    return closedAnswer(channelId, after, sent.hash);
  }

  return {
    topUp,
    /** Relays the payer's withdrawal once its close delay is over (one flight per channel per process). */
    withdraw(channelId: Hex): Promise<ChannelWithdrawResponse> {
      const running = withdrawals.get(channelId);
      if (running !== undefined) return running;
      const flight = relayWithdraw(channelId).finally(() => withdrawals.delete(channelId));
      withdrawals.set(channelId, flight);
      return flight;
    },
  };
}

export type ChannelFundsService = ReturnType<typeof createChannelFundsService>;
