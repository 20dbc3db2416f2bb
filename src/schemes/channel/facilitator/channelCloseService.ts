/**
 * Closing channels through the facilitator (docs/channels.md, "Closing"):
 * - `POST /channels/:id/close-request`: the payer's EIP-712 RequestClose, relayed gasless. Checked like
 *   an open (channel exists and is open, deadline, signature by the payer or an ERC-1271 payer left to
 *   the simulation, the payer's rate limit, simulation). Idempotent: a channel already asked to close
 *   answers with its request. The claim worker is signalled: the payee's vouchers must land before the
 *   payer may withdraw.
 * - `POST /channels/:id/close` (the payee's API key): a cooperative close with the latest voucher held,
 *   done by the claim worker through the outbox once no claim of the channel is in flight.
 * - `POST /channels/:id/withdraw` and `POST /channels/:id/top-up`: the payer's withdrawal after the close
 *   delay and its relayed top-up (channelFundsService.ts), served with the close routes because they
 *   share their context.
 */

import { type Address, getAddress, type Hash, type Hex, recoverTypedDataAddress } from "viem";
import { channelCallForRelay } from "../../../chain/actions/channels/channelCallForRelay.ts";
import {
  channelsDomain,
  requestCloseTypes,
} from "../../../chain/actions/channels/signChannelCloseRequest.ts";
import { minimumAmountOf } from "../../../facilitator/checkSignedPayment.ts";
import type { FacilitatorToken } from "../../../facilitator/facilitatorToken.ts";
import type {
  ChannelCloseRequest,
  ChannelCloseRequestResponse,
  ChannelCloseResponse,
} from "../../../protocol/channels.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { readKnownChannel } from "./channelChain.ts";
import { toChannelError } from "./channelErrors.ts";
import { type ChannelFundsContext, createChannelFundsService } from "./channelFundsService.ts";
import { findChannel, markCloseRequested, markCloseWanted, upsertChannel } from "./channelRecords.ts";
import { checkPayerSigned } from "./checkReceiveAuthorization.ts";
import { requireServedToken } from "./servedToken.ts";

/** The funds service's context, with its top-up limits defaulted, and the close's own options. */
export type ChannelCloseContext = Omit<ChannelFundsContext, "minTopUp" | "minRemainingSeconds"> & {
  /** The smallest top-up relayed, per token (default 10 × the token's minimum payment, as a deposit). */
  minTopUp?: ((token: FacilitatorToken) => bigint) | undefined;
  /** Seconds a top-up's authorization must still be valid for when it arrives (default 10). */
  minRemainingSeconds?: number | undefined;
  /** How long `close` waits for its transaction before answering `closing` (default 20 s). */
  closeWaitMs?: number | undefined;
  sleep?: ((ms: number) => Promise<void>) | undefined;
};

export function createChannelCloseService(ctx: ChannelCloseContext) {
  const where = { chainId: ctx.chainId, contract: ctx.contract };
  const sleep = ctx.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));

  const chain = (channelId: Hex) => readKnownChannel(ctx.publicClient, where, channelId);

  const requested = (
    channelId: Hex,
    c: { closeRequestedAt: number; closeDelay: number },
    tx?: Hash,
  ): ChannelCloseRequestResponse => ({
    channelId,
    ...(tx === undefined ? {} : { transaction: tx }),
    closeRequestedAt: c.closeRequestedAt,
    closableAt: c.closeRequestedAt + c.closeDelay,
  });

  async function requestClose(
    channelId: Hex,
    req: ChannelCloseRequest,
  ): Promise<ChannelCloseRequestResponse> {
    const before = await chain(channelId);
    // A channel in a token not served here: no gas spent, no row, no event for its payee.
    requireServedToken(ctx.tokens, before);
    if (before.closed) throw new TollgateError("InvalidRequest", "the channel is closed");
    const deadline = BigInt(req.deadline);
    if (deadline < BigInt(Math.floor(ctx.clock.now() / 1000))) {
      throw new TollgateError("AuthorizationExpired", "the close request's deadline has passed");
    }
    await checkPayerSigned(
      ctx.publicClient,
      before.payer,
      () =>
        recoverTypedDataAddress({
          domain: channelsDomain({ chainId: ctx.chainId, channels: ctx.contract }),
          types: requestCloseTypes,
          primaryType: "RequestClose",
          message: { channelId, deadline },
          signature: req.signature,
        }),
      "the close request is not signed by the channel's payer",
    );
    if (before.closeRequestedAt > 0) {
      // Already asked (by this request before, or by the payer on chain): answer with it.
      await upsertChannel(ctx.store, before);
      return requested(channelId, before);
    }
    ctx.takePayer(before.payer);
    const call = channelCallForRelay({
      channels: ctx.contract,
      functionName: "requestCloseFor",
      args: [channelId, deadline, req.signature],
    });
    try {
      await ctx.publicClient.simulateContract({ ...call.simulation, account: ctx.gas.address } as never);
    } catch (error) {
      throw toChannelError(error);
    }
    let sent: { hash: Hash };
    try {
      sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
    } catch (error) {
      const after = await chain(channelId);
      if (after.closeRequestedAt > 0) return requested(channelId, after);
      throw toChannelError(error);
    }
    const after = await chain(channelId);
    await ctx.store.transaction(async (db) => {
      await upsertChannel(db, after);
      await markCloseRequested(db, channelId, after.closeRequestedAt);
      await ctx.recordEvent(db, "channel.close_requested", {
        provider: after.payee.toLowerCase(),
        channelId,
        payer: getAddress(after.payer),
        payee: getAddress(after.payee),
        closeRequestedAt: after.closeRequestedAt,
        closableAt: after.closeRequestedAt + after.closeDelay,
        transaction: sent.hash,
      });
    });
    ctx.signalWorker();
    return requested(channelId, after, sent.hash);
  }

  async function close(payee: Address, channelId: Hex): Promise<ChannelCloseResponse> {
    let row = await findChannel(ctx.store, channelId);
    if (row === undefined) {
      const c = await chain(channelId);
      // Another provider's channel, or one in a token not served here, never becomes a row.
      if (getAddress(c.payee) !== getAddress(payee)) {
        throw new TollgateError("NotFound", "no such channel of this provider");
      }
      requireServedToken(ctx.tokens, c);
      row = await upsertChannel(ctx.store, c);
    }
    if (getAddress(row.payee) !== getAddress(payee)) {
      throw new TollgateError("NotFound", "no such channel of this provider");
    }
    if (!row.closed) {
      await markCloseWanted(ctx.store, channelId);
      ctx.signalWorker();
      const until = ctx.clock.now() + (ctx.closeWaitMs ?? 20_000);
      while (ctx.clock.now() < until) {
        row = (await findChannel(ctx.store, channelId)) ?? row;
        if (row.closed || !row.close_wanted) break;
        await sleep(100);
      }
    }
    if (!row.closed) {
      if (!row.close_wanted && row.claim_error !== null) {
        throw new TollgateError(
          "ChainUnavailable",
          `the cooperative close failed (${row.claim_error}); try again`,
          {
            retryAfter: 5,
          },
        );
      }
      return { channelId, status: "closing" };
    }
    const c = await chain(channelId);
    return {
      channelId,
      status: "closed",
      claimed: c.claimed.toString(),
      refunded: (c.deposit - c.claimed).toString(),
    };
  }

  const funds = createChannelFundsService({
    ...ctx,
    minTopUp: ctx.minTopUp ?? ((token) => 10n * minimumAmountOf(token)),
    minRemainingSeconds: ctx.minRemainingSeconds ?? 10,
  });

  return { requestClose, close, topUp: funds.topUp, withdraw: funds.withdraw };
}

export type ChannelCloseService = ReturnType<typeof createChannelCloseService>;
