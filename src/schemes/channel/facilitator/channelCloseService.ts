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
import {
  type ChainChannel,
  type ChannelRow,
  findChannel,
  markCloseRequested,
  markCloseWanted,
  upsertChannel,
} from "./channelRecords.ts";
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

type Sleep = (ms: number) => Promise<void>;

const chain = (ctx: ChannelCloseContext, channelId: Hex) =>
  readKnownChannel(ctx.publicClient, { chainId: ctx.chainId, contract: ctx.contract }, channelId);

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

/** The close request's checks: served token, channel open, deadline, the payer's signature. */
async function checkCloseRequest(
  ctx: ChannelCloseContext,
  channelId: Hex,
  req: ChannelCloseRequest,
): Promise<{ before: ChainChannel; deadline: bigint }> {
  const before = await chain(ctx, channelId);
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
  return { before, deadline };
}

/** Records the close request the chain now holds, with its `channel.close_requested` event. */
async function recordCloseRequested(
  ctx: ChannelCloseContext,
  channelId: Hex,
  after: ChainChannel,
  hash: Hash,
) {
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
      transaction: hash,
    });
  });
}

async function requestClose(
  ctx: ChannelCloseContext,
  channelId: Hex,
  req: ChannelCloseRequest,
): Promise<ChannelCloseRequestResponse> {
  const { before, deadline } = await checkCloseRequest(ctx, channelId, req);
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
    const after = await chain(ctx, channelId);
    if (after.closeRequestedAt > 0) return requested(channelId, after);
    throw toChannelError(error);
  }
  const after = await chain(ctx, channelId);
  await recordCloseRequested(ctx, channelId, after, sent.hash);
  ctx.signalWorker();
  return requested(channelId, after, sent.hash);
}

/** The payee's channel row (recorded from the chain when first asked); `NotFound` for another's. */
async function payeeRow(ctx: ChannelCloseContext, payee: Address, channelId: Hex): Promise<ChannelRow> {
  let row = await findChannel(ctx.store, channelId);
  if (row === undefined) {
    const c = await chain(ctx, channelId);
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
  return row;
}

/** Asks the claim worker for the close and waits up to `closeWaitMs` for it; the row as last read. */
async function waitForClose(
  ctx: ChannelCloseContext,
  sleep: Sleep,
  channelId: Hex,
  row: ChannelRow,
): Promise<ChannelRow> {
  await markCloseWanted(ctx.store, channelId);
  ctx.signalWorker();
  const until = ctx.clock.now() + (ctx.closeWaitMs ?? 20_000);
  let last = row;
  while (ctx.clock.now() < until) {
    last = (await findChannel(ctx.store, channelId)) ?? last;
    if (last.closed || !last.close_wanted) break;
    await sleep(100);
  }
  return last;
}

async function close(
  ctx: ChannelCloseContext,
  sleep: Sleep,
  payee: Address,
  channelId: Hex,
): Promise<ChannelCloseResponse> {
  let row = await payeeRow(ctx, payee, channelId);
  if (!row.closed) row = await waitForClose(ctx, sleep, channelId, row);
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
  const c = await chain(ctx, channelId);
  return {
    channelId,
    status: "closed",
    claimed: c.claimed.toString(),
    refunded: (c.deposit - c.claimed).toString(),
  };
}

export function createChannelCloseService(ctx: ChannelCloseContext) {
  const sleep = ctx.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const funds = createChannelFundsService({
    ...ctx,
    minTopUp: ctx.minTopUp ?? ((token) => 10n * minimumAmountOf(token)),
    minRemainingSeconds: ctx.minRemainingSeconds ?? 10,
  });
  return {
    requestClose: (channelId: Hex, req: ChannelCloseRequest): Promise<ChannelCloseRequestResponse> =>
      requestClose(ctx, channelId, req),
    close: (payee: Address, channelId: Hex): Promise<ChannelCloseResponse> =>
      close(ctx, sleep, payee, channelId),
    topUp: funds.topUp,
    withdraw: funds.withdraw,
  };
}

export type ChannelCloseService = ReturnType<typeof createChannelCloseService>;
