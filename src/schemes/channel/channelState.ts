/**
 * What a gate knows of a channel: its terms and deposit as `TollgateChannels` holds them, with the
 * session key imported once as a `KeyObject` so a voucher costs one P-256 verify and no parsing.
 *
 * A source (`ChannelStateSource`) reads it from the facilitator's `GET /channels/:id` or from the chain;
 * the verifier caches it. Of its fields only the deposit (top-up), `claimed` and the close state change
 * after the open, and none of them can make an accepted voucher worthless: a claim never exceeds the
 * deposit the voucher was checked against, and the payee may claim until the close deadline.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import type { Address, Hex } from "viem";
import { z } from "zod";
import { readChannel } from "../../chain/actions/channels/readChannel.ts";
import type { ReadClient } from "../../chain/clientTypes.ts";
import type { FacilitatorClient } from "../../http/facilitatorClient.ts";
import { AddressSchema, Hex8Schema, Hex32Schema } from "../../protocol/address.ts";
import { AtomicBigIntSchema } from "../../protocol/amount.ts";
import { TollgateError } from "../../protocol/errors.ts";

/** A channel as the gate checks vouchers against it. */
export type ChannelState = {
  channelId: Hex;
  payer: Address;
  payee: Address;
  token: Address;
  /** Total deposited (smallest unit); grows only by top-up. */
  deposit: bigint;
  /** Paid out to the payee so far. */
  claimed: bigint;
  /** The session key's public point, as the contract stores it. */
  sessionKeyX: Hex;
  sessionKeyY: Hex;
  /** The session key, imported for `crypto.verify`. */
  sessionKey: KeyObject;
  /** Seconds between a close request and the payer's withdrawal. */
  closeDelay: number;
  /** Unix seconds of the payer's close request; 0 while none. */
  closeRequestedAt: number;
  closed: boolean;
  /**
   * The salt's first 8 bytes as the contract keeps them: the tag of the voucher store the channel was
   * opened for (a gate serves only its own); `undefined` when the source did not say.
   */
  tag: Hex | undefined;
};

/** Where a gate reads channels from. `undefined`: no such channel (never opened). */
export type ChannelStateSource = {
  /**
   * `context.client`: who asked, as the gate's adapter saw them (`SchemeRequest.client`), for a source
   * that shares its reads fairly among clients (channelLookupGuard.ts); other sources ignore it.
   */
  get(channelId: Hex, context?: ChannelLookupContext): Promise<ChannelState | undefined>;
};

/** Who a channel read is for: the requesting client's address key, when the host gave one. */
export type ChannelLookupContext = { client?: string | undefined };

/** The facilitator's `GET /channels/:id` reply, as far as a gate reads it. */
export const ChannelStateResponseSchema = z.object({
  channelId: Hex32Schema,
  payer: AddressSchema,
  payee: AddressSchema,
  token: AddressSchema,
  deposit: AtomicBigIntSchema,
  claimed: AtomicBigIntSchema,
  sessionKeyX: Hex32Schema,
  sessionKeyY: Hex32Schema,
  closeDelay: z.coerce.number().int().nonnegative(),
  closeRequestedAt: z.coerce.number().int().nonnegative(),
  closed: z.boolean(),
  tag: Hex8Schema.optional(),
});
export type ChannelStateResponse = z.infer<typeof ChannelStateResponseSchema>;

/**
 * Imports a P-256 public point (32-byte x and y) as a verify key. Throws `InvalidRequest` for a point
 * that is not on the curve (a contract accepts any non-zero words; node:crypto refuses bad points).
 */
export function importSessionKey(x: Hex, y: Hex): KeyObject {
  try {
    return createPublicKey({
      key: {
        kty: "EC",
        crv: "P-256",
        x: Buffer.from(x.slice(2), "hex").toString("base64url"),
        y: Buffer.from(y.slice(2), "hex").toString("base64url"),
      },
      format: "jwk",
    });
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "channel session key is not a P-256 point", { cause });
  }
}

/** A `ChannelState` from its fields; `undefined` when the session key is not a valid point. */
export function toChannelState(fields: Omit<ChannelState, "sessionKey">): ChannelState | undefined {
  try {
    return { ...fields, sessionKey: importSessionKey(fields.sessionKeyX, fields.sessionKeyY) };
  } catch {
    return undefined;
  }
}

/**
 * Reads channels from the facilitator (`GET /channels/:id`); a 404 is "no such channel". With the
 * gate's provider API key the reads count against that provider's rate limit at the facilitator, not
 * the gate's address's, which anyone sharing or flooding from that address could spend.
 * @example
 * const source = createFacilitatorChannelSource(createFacilitatorClient({ url, fetch }), apiKey);
 */
export function createFacilitatorChannelSource(
  facilitator: Pick<FacilitatorClient, "request">,
  apiKey?: string | undefined,
): ChannelStateSource {
  const headers = apiKey === undefined ? undefined : { authorization: `Bearer ${apiKey}` };
  return {
    async get(channelId) {
      let reply: ChannelStateResponse;
      try {
        reply = await facilitator.request("GET", `/channels/${channelId}`, ChannelStateResponseSchema, {
          headers,
        });
      } catch (error) {
        if (error instanceof TollgateError && error.code === "NotFound") return undefined;
        throw error;
      }
      if (reply.channelId !== channelId) {
        throw new TollgateError("ChainUnavailable", "facilitator answered for another channel");
      }
      return toChannelState({ ...reply, tag: reply.tag });
    },
  };
}

/**
 * Reads channels straight from `TollgateChannels` (one `eth_call`): for a gate that trusts its own
 * node more than a facilitator.
 */
export function createChainChannelSource(client: ReadClient, channels: Address): ChannelStateSource {
  return {
    async get(channelId) {
      const c = await readChannel(client, { channels, channelId });
      if (/^0x0{40}$/.test(c.payer)) return undefined;
      return toChannelState({
        channelId,
        payer: c.payer,
        payee: c.payee,
        token: c.token,
        deposit: c.deposit,
        claimed: c.claimed,
        sessionKeyX: c.sessionKeyX,
        sessionKeyY: c.sessionKeyY,
        closeDelay: Number(c.closeDelay),
        closeRequestedAt: Number(c.closeRequestedAt),
        closed: c.closed,
        tag: c.tag.toLowerCase() as Hex,
      });
    },
  };
}
