/**
 * HTTP routes of the channel API (docs/channels.md): `POST /channels` (relayed gasless open),
 * `GET /channels/:id` (public chain state), `POST /channels/:id/close-request` and
 * `POST /channels/:id/top-up` (relayed, payer-signed), `POST /channels/:id/withdraw` (relayed for anyone,
 * pays the payer only), `POST /channels/:id/close` and `POST /channels/vouchers` (the payee's provider
 * API key).
 */
import type { Hono } from "hono";
import type { Address, Hex } from "viem";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { requireProvider } from "../../../facilitator/providers/requireProvider.ts";
import { readJsonBody } from "../../../http/httpErrors.ts";
import { routeDoc } from "../../../http/routeDocs.ts";
import { Hex32Schema } from "../../../protocol/address.ts";
import {
  ChannelCloseRequestResponseSchema,
  ChannelCloseRequestSchema,
  ChannelCloseResponseSchema,
  ChannelOpenRequestSchema,
  ChannelOpenResponseSchema,
  ChannelStateSchema,
  ChannelTopUpRequestSchema,
  ChannelTopUpResponseSchema,
  ChannelVouchersResponseSchema,
  ChannelWithdrawResponseSchema,
} from "../../../protocol/channels.ts";
import { ChannelVouchersRequestSchema } from "../../../protocol/channelVoucher.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { parseWire } from "../../../protocol/parseWire.ts";
import { channelToWire, readChainChannel } from "./channelChain.ts";
import type { ChannelCloseService } from "./channelCloseService.ts";
import { toChannelError } from "./channelErrors.ts";
import type { ChannelOpenService } from "./channelOpenService.ts";
import type { ChannelVoucherIntake } from "./channelVoucherIntake.ts";

export type ChannelRouteDeps = {
  ctx: Pick<FacilitatorContext, "store" | "publicClient" | "network" | "chainId">;
  contract: Address;
  opens: ChannelOpenService;
  closes: ChannelCloseService;
  vouchers: ChannelVoucherIntake;
  /** New vouchers arrived: the claim worker may have a batch to send. */
  onVouchers(): void;
};

const params = { id: Hex32Schema };

/** The channel routes, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  open: routeDoc({
    summary:
      "Relay a payer's gasless channel open (EIP-3009 ReceiveWithAuthorization binding the terms; idempotent on its nonce)",
    request: ChannelOpenRequestSchema,
    response: ChannelOpenResponseSchema,
    status: 201,
    errors: [400, 402, 409, 413, 422, 429, 503],
  }),
  vouchers: routeDoc({
    summary: "Hand over a gate's latest channel vouchers for batched claims (the payee's provider key)",
    request: ChannelVouchersRequestSchema,
    response: ChannelVouchersResponseSchema,
    errors: [400, 413, 429, 503],
  }),
  state: routeDoc({
    summary:
      "A channel's public chain state: payer, payee, token, deposit, claimed, session key, close state",
    params,
    response: ChannelStateSchema,
    errors: [400, 404, 503],
  }),
  closeRequest: routeDoc({
    summary: "Relay the payer's EIP-712 RequestClose; the payer may withdraw after the close delay",
    params,
    request: ChannelCloseRequestSchema,
    response: ChannelCloseRequestResponseSchema,
    errors: [400, 404, 413, 422, 429, 503],
  }),
  topUp: routeDoc({
    summary:
      "Relay the payer's EIP-3009 top-up of its channel (nonce topUpNonce(channelId, salt)); 201, or 200 for a repeat",
    params,
    request: ChannelTopUpRequestSchema,
    response: ChannelTopUpResponseSchema,
    status: 201,
    errors: [400, 402, 404, 413, 422, 429, 503],
  }),
  withdraw: routeDoc({
    summary:
      "Relay the payer's withdrawal of the unclaimed deposit once the close delay is over (anyone may ask; it pays the payer only)",
    params,
    response: ChannelWithdrawResponseSchema,
    errors: [400, 404, 429, 503],
  }),
  close: routeDoc({
    summary:
      "Cooperative close by the payee with its latest voucher: claims it and refunds the rest to the payer (202 while on its way)",
    params,
    response: ChannelCloseResponseSchema,
    errors: [400, 404, 429, 503],
  }),
};

const idParam = (text: string | undefined): Hex => parseWire(Hex32Schema, text, { what: "channel id" });

export function mountChannelRoutes(app: Hono, deps: ChannelRouteDeps): void {
  const { ctx } = deps;

  app.post("/channels", docs.open, async (c) => {
    const request = await readJsonBody(c, ChannelOpenRequestSchema);
    const { status, body } = await deps.opens.open(request);
    return c.json(body, status);
  });

  // Registered before `/channels/:id/...` so that "vouchers" is never read as an id.
  app.post("/channels/vouchers", docs.vouchers, requireProvider(ctx), async (c) => {
    const { vouchers } = await readJsonBody(c, ChannelVouchersRequestSchema);
    const results = await deps.vouchers.accept(c.get("provider").address, vouchers);
    if (results.some((r) => r.status === "stored")) deps.onVouchers();
    return c.json({ results });
  });

  app.get("/channels/:id", docs.state, async (c) => {
    const channelId = idParam(c.req.param("id"));
    const where = { chainId: ctx.chainId, contract: deps.contract };
    const channel = await readChainChannel(ctx.publicClient, where, channelId).catch((e: unknown) => {
      throw toChannelError(e);
    });
    if (channel === undefined) throw new TollgateError("NotFound", "no such channel");
    return c.json(channelToWire(channel, ctx.network));
  });

  app.post("/channels/:id/close-request", docs.closeRequest, async (c) => {
    const channelId = idParam(c.req.param("id"));
    const request = await readJsonBody(c, ChannelCloseRequestSchema);
    return c.json(await deps.closes.requestClose(channelId, request));
  });

  app.post("/channels/:id/top-up", docs.topUp, async (c) => {
    const channelId = idParam(c.req.param("id"));
    const request = await readJsonBody(c, ChannelTopUpRequestSchema);
    const { status, body } = await deps.closes.topUp(channelId, request);
    return c.json(body, status);
  });

  app.post("/channels/:id/withdraw", docs.withdraw, async (c) => {
    const channelId = idParam(c.req.param("id"));
    return c.json(await deps.closes.withdraw(channelId));
  });

  app.post("/channels/:id/close", docs.close, requireProvider(ctx), async (c) => {
    const channelId = idParam(c.req.param("id"));
    const result = await deps.closes.close(c.get("provider").address, channelId);
    return c.json(result, result.status === "closed" ? 200 : 202);
  });
}
