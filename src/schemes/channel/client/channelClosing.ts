/**
 * Ends a payer's channels: a close request (relayed, gasless) followed by the seller's cooperative close
 * when its gate is known and reachable, the withdrawal after the close delay, and re-reading a channel's
 * state from the facilitator. A channel found closed leaves the book.
 */
import type { Hex } from "viem";
import { signChannelCloseRequest } from "../../../chain/actions/channels/signChannelCloseRequest.ts";
import { createFacilitatorClient } from "../../../http/facilitatorClient.ts";
import {
  type ChannelCloseRequestResponse,
  ChannelCloseRequestResponseSchema,
  ChannelCloseResponseSchema,
  ChannelStateSchema,
  type ChannelWithdrawResponse,
  ChannelWithdrawResponseSchema,
} from "../../../protocol/channels.ts";
import { unixSeconds } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import { CHANNEL_CLOSE_HEADER } from "../channelHeaders.ts";
import type { Live } from "./channelBook.ts";
import type { ChannelWalletContext } from "./channelWalletContext.ts";
import type { ChannelRecord } from "./channelWalletStore.ts";
import type { ChannelCloseOutcome } from "./channelWalletTypes.ts";

export type ChannelClosing = {
  requestClose(
    channelId: Hex,
    closeOptions?: { cooperative?: boolean | undefined },
  ): Promise<ChannelCloseOutcome>;
  refresh(channelId: Hex): Promise<ChannelRecord | undefined>;
  withdraw(channelId: Hex): Promise<ChannelWithdrawResponse>;
};

type ClosingContext = Pick<ChannelWalletContext, "options" | "clock" | "chainId" | "book">;

/** Asks the seller's gate to close the channel cooperatively; its refusal or absence costs nothing. */
async function closeCooperatively(
  ctx: ClosingContext,

  entry: Live,
  channelId: Hex,
  reply: ChannelCloseRequestResponse,
): Promise<ChannelCloseOutcome> {
  const route = entry.record.closeRoute;
  if (route === undefined || ctx.options.fetch === undefined) return reply;
  // The seller's gate seals the channel, hands its last voucher over and closes: the rest comes back
  // now. Its refusal or absence costs nothing: the close request above already runs the delay.
  try {
    const url = new URL(route.url);
    const gate = createFacilitatorClient({ url: url.origin, fetch: ctx.options.fetch, timeoutMs: 60_000 });
    const cooperative = await gate.request(
      route.method,
      `${url.pathname}${url.search}`,
      ChannelCloseResponseSchema,
      {
        headers: { [CHANNEL_CLOSE_HEADER]: channelId },
      },
    );
    if (cooperative.channelId.toLowerCase() !== channelId.toLowerCase()) {
      return { ...reply, cooperativeError: "the gate answered for another channel" };
    }
    if (cooperative.status === "closed") {
      ctx.book.put(entry, { status: "closed" });
      ctx.book.live.delete(channelId);
    }
    return { ...reply, cooperative };
  } catch (error) {
    return { ...reply, cooperativeError: error instanceof Error ? error.message : String(error) };
  }
}
async function requestClose(
  ctx: ClosingContext,

  channelId: Hex,
  closeOptions: { cooperative?: boolean | undefined } = {},
): Promise<ChannelCloseOutcome> {
  const entry = ctx.book.live.get(channelId);
  if (entry === undefined) throw new TollgateError("NotFound", "no such channel in this wallet");
  const deadline = BigInt(unixSeconds(ctx.clock) + 600);
  const signature = await signChannelCloseRequest(ctx.options.account, {
    chainId: ctx.chainId,
    channels: entry.record.contract,
    channelId,
    deadline,
  });
  const reply = await ctx.options.facilitator.request(
    "POST",
    `/channels/${channelId}/close-request`,
    ChannelCloseRequestResponseSchema,
    { body: { deadline: deadline.toString(), signature } },
  );
  ctx.book.put(entry, { status: "closing" });
  if (closeOptions.cooperative === false) return reply;
  return closeCooperatively(ctx, entry, channelId, reply);
}
async function refresh(ctx: ClosingContext, channelId: Hex): Promise<ChannelRecord | undefined> {
  const entry = ctx.book.live.get(channelId);
  if (entry === undefined) return undefined;
  let state: ReturnType<typeof ChannelStateSchema.parse>;
  try {
    state = await ctx.options.facilitator.request("GET", `/channels/${channelId}`, ChannelStateSchema);
  } catch (error) {
    if (isTollgateError(error, "NotFound")) {
      // Never opened: past its authorization's validity it never will be.
      if (entry.record.status === "opening" && entry.record.openValidBefore < unixSeconds(ctx.clock)) {
        ctx.book.put(entry, { status: "closed" });
      }
      return entry.record;
    }
    throw error;
  }
  ctx.book.put(entry, {
    deposit: BigInt(state.deposit),
    status: state.closed ? "closed" : state.closeRequestedAt !== 0 ? "closing" : "open",
  });
  if (entry.record.status === "closed") ctx.book.live.delete(channelId);
  return entry.record;
}
async function withdraw(ctx: ClosingContext, channelId: Hex): Promise<ChannelWithdrawResponse> {
  const entry = ctx.book.live.get(channelId);
  const reply = await ctx.options.facilitator.request(
    "POST",
    `/channels/${channelId}/withdraw`,
    ChannelWithdrawResponseSchema,
    { body: {} },
  );
  if (entry !== undefined) {
    ctx.book.put(entry, { status: "closed" });
    ctx.book.live.delete(channelId);
  }
  return reply;
}
export function createChannelClosing(ctx: ClosingContext): ChannelClosing {
  return {
    requestClose: (channelId, closeOptions) => requestClose(ctx, channelId, closeOptions),
    refresh: (channelId) => refresh(ctx, channelId),
    withdraw: (channelId) => withdraw(ctx, channelId),
  };
}
