/**
 * The seller's half of a cooperative close (docs/channels.md, "Cooperative close"). A payer that asked
 * to close (its EIP-712 `RequestClose`, relayed on chain by the facilitator) sends any request of a
 * route sold by channel with `X-Tollgate-Channel-Close: <channelId>`; the gate then
 *
 * 1. reads the channel afresh (not from its cache) and acts only when it is this gate's (payee, token)
 *    and the chain holds the payer's close request — the payer's signature is the only authority, so a
 *    stranger sending the header can at most hasten what the payer asked for;
 * 2. seals the channel in its voucher store: atomically with charges and across the seller's instances,
 *    no request is served on it afterwards, so the tally `seal` returns holds the last voucher served for;
 * 3. hands that voucher to the facilitator (`POST /channels/vouchers`) and waits until it is stored;
 * 4. asks the facilitator to close cooperatively (`POST /channels/:id/close`, the provider's key), which
 *    sends `closeWithVoucher`: the final voucher's rest is paid to the seller and the deposit's rest
 *    returned to the payer in one transaction.
 *
 * Attacker's view: the payer cannot close below what was served (the seller's own sealed voucher goes into
 * the close, and only the payee or its operator may send `closeWithVoucher`); the seller cannot take more
 * than the latest voucher (the contract pays a session-key-signed cumulative amount at most, up to the
 * deposit); a replay finds the channel closed and answers the outcome read from the chain; a header for a
 * channel whose payer did not ask to close, of another seller or of another of its gates (another voucher
 * store's tag: that store holds its vouchers), is refused and seals nothing.
 */
import type { Address, Hex } from "viem";
import { errorResponse, faultResponse } from "../../gate/gateResponses.ts";
import type { FacilitatorClient } from "../../http/facilitatorClient.ts";
import { type ChannelCloseResponse, ChannelCloseResponseSchema } from "../../protocol/channels.ts";
import { httpStatusOf } from "../../protocol/errors.ts";
import type { SchemeLogger } from "../types.ts";
import { CHANNEL_CLOSE_HEADER } from "./channelHeaders.ts";
import type { ChannelLookupContext, ChannelStateSource } from "./channelState.ts";
import type { VoucherStore } from "./gate/voucherStore.ts";

/** `POST /channels/:id/close` with the provider's API key: the facilitator's cooperative close. */
export function postChannelClose(
  facilitator: Pick<FacilitatorClient, "request">,
  apiKey: string,
): (channelId: Hex) => Promise<ChannelCloseResponse> {
  return (channelId) =>
    facilitator.request("POST", `/channels/${channelId}/close`, ChannelCloseResponseSchema, {
      headers: { authorization: `Bearer ${apiKey}` },
      body: {},
    });
}

export type CooperativeCloserOptions = {
  payTo: Address;
  token: Address;
  /** The store's tag: only channels opened for it are closed here (their vouchers are in this store). */
  tag: Hex;
  /** Read afresh for every close (the close request must be on chain). */
  source: ChannelStateSource;
  store: VoucherStore;
  /** Hands every pending voucher to the facilitator; resolves once they are stored there. */
  forward(): Promise<number>;
  /** The facilitator's cooperative close (`postChannelClose`); `undefined` when the gate has no API key. */
  closeAtFacilitator: ((channelId: Hex) => Promise<ChannelCloseResponse>) | undefined;
  logger?: SchemeLogger | undefined;
};

const ID = /^0x[0-9a-fA-F]{64}$/;

const json = (body: unknown, status: number) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });

/**
 * @example
 * const closer = createCooperativeCloser({ payTo, token, tag: await store.tag(), source, store, forward: forwarder.flush,
 *   closeAtFacilitator: postChannelClose(facilitator, apiKey) });
 * const response = await closer.close(request.headers.get(CHANNEL_CLOSE_HEADER) ?? "");
 */
export function createCooperativeCloser(options: CooperativeCloserOptions) {
  const payTo = options.payTo.toLowerCase();
  const token = options.token.toLowerCase();
  const tag = options.tag.toLowerCase();
  /** One close per channel at a time in this process; concurrent askers share its answer. */
  const flights = new Map<string, Promise<Response>>();

  async function closeOne(channelId: Hex, context: ChannelLookupContext | undefined): Promise<Response> {
    const state = await options.source.get(channelId, context);
    if (state === undefined || state.payee.toLowerCase() !== payTo || state.token.toLowerCase() !== token) {
      return errorResponse("NotFound", "no such channel of this seller", httpStatusOf("NotFound"));
    }
    if (state.tag?.toLowerCase() !== tag) {
      return errorResponse("NotFound", "the channel was opened for another gate", httpStatusOf("NotFound"));
    }
    if (state.closed) {
      return json(
        {
          channelId,
          status: "closed",
          claimed: state.claimed.toString(),
          refunded: (state.deposit - state.claimed).toString(),
        },
        200,
      );
    }
    if (state.closeRequestedAt === 0) {
      return errorResponse(
        "InvalidRequest",
        "the payer has not asked to close this channel: relay its signed close request first (POST /channels/:id/close-request)",
        httpStatusOf("InvalidRequest"),
      );
    }
    if (options.closeAtFacilitator === undefined) {
      return errorResponse(
        "InvalidRequest",
        "this gate does not close channels cooperatively (it has no providerApiKey); withdraw after the close delay",
        httpStatusOf("InvalidRequest"),
      );
    }
    // Sealed before the final voucher is read: no request served later can be left out of the close.
    const tally = await options.store.seal(channelId, state.claimed);
    await options.forward();
    const reply = await options.closeAtFacilitator(channelId);
    options.logger?.debug(
      { channelId, highest: tally.highest.toString(), status: reply.status },
      "channel closed cooperatively at the payer's request",
    );
    return json(reply, reply.status === "closed" ? 200 : 202);
  }

  return {
    /**
     * Answers one `X-Tollgate-Channel-Close` request; never throws (faults are 5xx without internals).
     * `context.client`: the asking client, whose share of unknown-id reads a lookup spends.
     */
    async close(header: string, context?: ChannelLookupContext): Promise<Response> {
      const text = header.trim();
      if (!ID.test(text)) {
        return errorResponse(
          "InvalidRequest",
          `${CHANNEL_CLOSE_HEADER} must be a 0x-prefixed 32-byte channel id`,
          httpStatusOf("InvalidRequest"),
        );
      }
      const channelId = text.toLowerCase() as Hex;
      let flight = flights.get(channelId);
      if (flight === undefined) {
        flight = closeOne(channelId, context)
          .catch((error: unknown) => {
            options.logger?.warn({ err: error, channelId }, "cooperative channel close failed");
            return faultResponse(error, "the channel could not be closed now; try again later");
          })
          .finally(() => flights.delete(channelId));
        flights.set(channelId, flight);
      }
      return (await flight).clone();
    },
  };
}

export type CooperativeCloser = ReturnType<typeof createCooperativeCloser>;
