/**
 * Channel vouchers (docs/channels.md): the off-chain payment of the `channel` scheme. A payer's
 * per-channel P-256 session key (authorised once by the payer's wallet when the channel was opened)
 * signs the cumulative amount the payee may claim from the channel; each paid request carries a
 * voucher for at least the previous cumulative plus the request's price.
 *
 * Signed message: 160 bytes, `abi.encode(bytes32 VOUCHER_TAG, uint256 chainId, address channels,
 * bytes32 channelId, uint256 cumulativeAmount)`, hashed with SHA-256 and signed with ECDSA P-256 in
 * IEEE-P1363 form (`r ‖ s`, 64 bytes) — what `TollgateChannels` checks with the P256VERIFY precompile.
 * The tag, chain id and contract bind a voucher to one deployment on one chain; the channel id binds
 * it to one payer, payee and token; the cumulative form makes replaying an older voucher worthless.
 *
 * Header: `X-Tollgate-Channel: 0x<channelId 64 hex>.<cumulative decimal>.<base64url(signature)>`,
 * parsed by hand (no JSON, no zod) because it sits on every paid request; every part is checked.
 */
import { type Address, type Hex, hexToBytes } from "viem";
import { z } from "zod";
import { AddressSchema, Hex8Schema, Hex32Schema } from "./address.ts";
import { AtomicAmountSchema, MAX_UINT256 } from "./amount.ts";
import { base64UrlDecode, base64UrlEncode } from "./base64.ts";
import { TollgateError } from "./errors.ts";
import { NetworkSchema } from "./network.ts";
import { HttpUrlSchema } from "./paymentRequired.ts";

/** `keccak256("TollgateChannels.Voucher.v1")`: the domain tag of every voucher message (`TollgateChannels.VOUCHER_TAG`). */
export const CHANNEL_VOUCHER_TAG: Hex = "0x2d4f2fd19d3e13dfa24ffab0da71e457fc839d704189602eb27c7efd1d300c05";

/** The request header carrying a voucher. */
export const CHANNEL_VOUCHER_HEADER = "X-Tollgate-Channel";

/** Bytes of the signed message: five 32-byte ABI words. */
export const CHANNEL_VOUCHER_MESSAGE_BYTES = 160;
/** Bytes of a P-256 signature in IEEE-P1363 form (`r ‖ s`). */
export const CHANNEL_VOUCHER_SIGNATURE_BYTES = 64;
/** Longest header value accepted: 66 (id) + 1 + 78 (uint256 digits) + 1 + 86 (signature). */
export const MAX_CHANNEL_VOUCHER_HEADER = 232;

/** A channel id: 32 bytes as lowercase 0x-hex. */
export const ChannelIdSchema = Hex32Schema;

/** A voucher as code holds it; `signature` is the 64-byte P1363 signature as base64url. */
export const ChannelVoucherSchema = z.object({
  channelId: ChannelIdSchema,
  cumulativeAmount: AtomicAmountSchema,
  signature: z.string().regex(/^[A-Za-z0-9_-]{86}$/, { error: "expected a base64url 64-byte signature" }),
});
export type ChannelVoucher = z.infer<typeof ChannelVoucherSchema>;

/** A voucher parsed from the header: amounts as `bigint`, signature as bytes. */
export type ParsedChannelVoucher = {
  channelId: Hex;
  cumulativeAmount: bigint;
  signature: Uint8Array;
};

/** Where a voucher may be spent: the chain and the `TollgateChannels` deployment. */
export type ChannelVoucherDomain = { chainId: number | bigint; channels: Address };

/**
 * A channel's tag: the first 8 bytes of its salt, kept by the contract. A gate offers the tag of its
 * voucher store and serves only channels carrying it, so a voucher is served by one store's gates only.
 */
export const ChannelTagSchema = Hex8Schema;

/**
 * The `tollgate.channel` extension of a 402 `channel` option: the terms on which the gate accepts
 * vouchers. The option's own `amount` is the route's price per request; `payTo`, `token` and
 * `network` are the channel's payee, token and chain.
 */
export const ChannelTermsSchema = z.object({
  /** `TollgateChannels` contract address. */
  contract: AddressSchema,
  /** The facilitator that opens channels (gasless) and receives the gate's vouchers. */
  facilitator: HttpUrlSchema,
  /** The smallest deposit this gate accepts a channel with (smallest unit). */
  minDeposit: AtomicAmountSchema,
  /** A deposit the gate suggests (a client's policy sizes its own from its forecast). */
  suggestedDeposit: AtomicAmountSchema,
  /** The shortest close delay (seconds) the gate accepts: its time to claim after a close request. */
  minCloseDelay: z.int().nonnegative(),
  /**
   * The tag of the gate's voucher store: a payer opens the channel with a salt that starts with it (the
   * gate serves no other channel). Absent from gates that predate it; their channels carry a random salt.
   */
  tag: ChannelTagSchema.optional(),
});
export type ChannelTerms = z.infer<typeof ChannelTermsSchema>;

/** A 402 `channel` option as the client reads it (the wire `accepts` entry's channel fields). */
export const ChannelOfferSchema = z.object({
  scheme: z.literal("channel"),
  network: NetworkSchema,
  token: AddressSchema,
  /** Price of one request on this route (smallest unit). */
  amount: AtomicAmountSchema,
  payTo: AddressSchema,
  channel: ChannelTermsSchema,
});
export type ChannelOffer = z.infer<typeof ChannelOfferSchema>;

function writeUint256(out: Uint8Array, offset: number, value: bigint): void {
  let v = value;
  for (let i = offset + 31; i >= offset; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
}

/**
 * The first 128 bytes of a channel's voucher messages (tag, chain id, contract, channel id), which
 * never change for one channel: a verifier builds it once and appends each cumulative amount.
 */
export function channelVoucherPrefix(domain: ChannelVoucherDomain, channelId: Hex): Uint8Array {
  const out = new Uint8Array(CHANNEL_VOUCHER_MESSAGE_BYTES);
  out.set(hexToBytes(CHANNEL_VOUCHER_TAG), 0);
  writeUint256(out, 32, BigInt(domain.chainId));
  out.set(hexToBytes(domain.channels), 64 + 12);
  out.set(hexToBytes(channelId), 96);
  return out.subarray(0, 128);
}

/** The 160-byte message a voucher signs, given the channel's prefix (`channelVoucherPrefix`). */
export function channelVoucherMessageFrom(prefix: Uint8Array, cumulativeAmount: bigint): Uint8Array {
  if (cumulativeAmount < 0n || cumulativeAmount > MAX_UINT256) {
    throw new TollgateError("InvalidAmount", "cumulative amount must be a uint256");
  }
  const out = new Uint8Array(CHANNEL_VOUCHER_MESSAGE_BYTES);
  out.set(prefix.subarray(0, 128), 0);
  writeUint256(out, 128, cumulativeAmount);
  return out;
}

/**
 * The 160-byte message of a voucher: `abi.encode(VOUCHER_TAG, chainId, channels, channelId,
 * cumulativeAmount)`.
 * @example
 * const message = channelVoucherMessage({ chainId: 31337, channels }, channelId, 30_000n);
 */
export function channelVoucherMessage(
  domain: ChannelVoucherDomain,
  channelId: Hex,
  cumulativeAmount: bigint,
): Uint8Array {
  return channelVoucherMessageFrom(channelVoucherPrefix(domain, channelId), cumulativeAmount);
}

/** The header value of a voucher. */
export function encodeChannelVoucher(voucher: {
  channelId: Hex;
  cumulativeAmount: bigint;
  signature: Uint8Array;
}): string {
  if (voucher.signature.length !== CHANNEL_VOUCHER_SIGNATURE_BYTES) {
    throw new TollgateError("InvalidEncoding", "a voucher signature is 64 bytes");
  }
  if (!/^0x[0-9a-fA-F]{64}$/.test(voucher.channelId)) {
    throw new TollgateError("InvalidEncoding", "a channel id is 32 bytes of 0x-hex");
  }
  if (voucher.cumulativeAmount < 0n || voucher.cumulativeAmount > MAX_UINT256) {
    throw new TollgateError("InvalidAmount", "cumulative amount must be a uint256");
  }
  return `${voucher.channelId.toLowerCase()}.${voucher.cumulativeAmount}.${base64UrlEncode(voucher.signature)}`;
}

const ID_PATTERN = /^0x[0-9a-f]{64}$/;
const AMOUNT_PATTERN = /^(0|[1-9][0-9]{0,77})$/;

/** Why a voucher header was refused: data, so the gate's hot path needs no exception. */
export type ChannelVoucherParse = { ok: true; voucher: ParsedChannelVoucher } | { ok: false; reason: string };

/**
 * Parses a voucher header strictly: lowercase 0x channel id, canonical decimal uint256, base64url of
 * exactly 64 bytes; surrounding spaces and tabs are ignored as HTTP does. Never throws.
 */
export function safeParseChannelVoucher(header: string): ChannelVoucherParse {
  if (typeof header !== "string") return { ok: false, reason: "voucher header is not text" };
  const text = header.trim();
  if (text.length > MAX_CHANNEL_VOUCHER_HEADER) return { ok: false, reason: "voucher header too long" };
  const firstDot = text.indexOf(".");
  const secondDot = firstDot < 0 ? -1 : text.indexOf(".", firstDot + 1);
  if (secondDot < 0 || text.indexOf(".", secondDot + 1) >= 0) {
    return { ok: false, reason: "a voucher is <channelId>.<cumulative>.<signature>" };
  }
  const channelId = text.slice(0, firstDot);
  const amount = text.slice(firstDot + 1, secondDot);
  const signatureText = text.slice(secondDot + 1);
  if (!ID_PATTERN.test(channelId)) return { ok: false, reason: "channel id must be lowercase 0x + 64 hex" };
  if (!AMOUNT_PATTERN.test(amount))
    return { ok: false, reason: "cumulative amount must be canonical decimal" };
  const cumulativeAmount = BigInt(amount);
  if (cumulativeAmount > MAX_UINT256) return { ok: false, reason: "cumulative amount above uint256" };
  if (signatureText.length !== 86) return { ok: false, reason: "signature must be 64 bytes of base64url" };
  let signature: Uint8Array;
  try {
    signature = base64UrlDecode(signatureText);
  } catch {
    return { ok: false, reason: "signature is not base64url" };
  }
  return { ok: true, voucher: { channelId: channelId as Hex, cumulativeAmount, signature } };
}

/** `safeParseChannelVoucher` that throws `InvalidEncoding` with the reason. */
export function parseChannelVoucher(header: string): ParsedChannelVoucher {
  const parsed = safeParseChannelVoucher(header);
  if (!parsed.ok) throw new TollgateError("InvalidEncoding", `invalid channel voucher: ${parsed.reason}`);
  return parsed.voucher;
}

/**
 * Vouchers per `POST /channels/vouchers` request at most: about 200 bytes of JSON each, so a full
 * request stays well under the facilitator's 64 KiB body limit.
 */
export const MAX_CHANNEL_VOUCHERS_PER_REQUEST = 200;

/**
 * `POST /channels/vouchers` (gate → facilitator, provider API key): the latest voucher the gate holds
 * for each channel, for the facilitator to claim in batches. Idempotent: a voucher at or below what the
 * facilitator holds for its channel changes nothing.
 */
export const ChannelVouchersRequestSchema = z.object({
  vouchers: z.array(ChannelVoucherSchema).min(1).max(MAX_CHANNEL_VOUCHERS_PER_REQUEST),
});
export type ChannelVouchersRequest = z.infer<typeof ChannelVouchersRequestSchema>;
