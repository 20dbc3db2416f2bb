/**
 * Wire bodies of the facilitator's channel endpoints (docs/channels.md): the relayed gasless open
 * (`POST /channels`), a channel's public state (`GET /channels/:id`), the payer's relayed close request
 * (`POST /channels/:id/close-request`), the payee's cooperative close (`POST /channels/:id/close`) and
 * the gate's voucher hand-over reply (`POST /channels/vouchers`; its request is in channelVoucher.ts).
 * Amounts and chain timestamps are decimal strings; addresses come out checksummed.
 */
import { z } from "zod";
import { AddressSchema, Hex8Schema, Hex32Schema, HexSchema } from "./address.ts";
import { AtomicAmountSchema, UintStringSchema } from "./amount.ts";
import { NetworkSchema } from "./network.ts";

/** TollgateChannels' MAX_CLOSE_DELAY: 30 days. */
export const MAX_CHANNEL_CLOSE_DELAY = 30 * 86_400;

/**
 * TollgateChannels' MIN_CLOSE_DELAY: 1 hour. The contract refuses to open a channel with less, however
 * it is opened: the delay is the payee's time to claim after a close request (docs/contracts.md).
 */
export const MIN_CHANNEL_CLOSE_DELAY = 3_600;

/** An EIP-3009 / EIP-712 signature: 65 bytes for an EOA, longer for an ERC-1271 wallet. */
const WalletSignatureSchema = HexSchema.refine((hex) => hex.length >= 132 && hex.length <= 4098, {
  error: "expected a 0x-hex signature of 65 to 2048 bytes",
});

/**
 * `POST /channels`: the payer's signed open, relayed by the facilitator (which pays the gas). The
 * signature is the payer's EIP-3009 ReceiveWithAuthorization of `amount` to the contract whose nonce is
 * `TollgateChannels.openNonce(payee, token, sessionKeyX, sessionKeyY, closeDelay, salt)`
 * (`signChannelOpen`), so it fixes every term; resending the same body is idempotent.
 */
export const ChannelOpenRequestSchema = z.strictObject({
  network: NetworkSchema,
  /** The TollgateChannels contract (must be the facilitator's). */
  contract: AddressSchema,
  token: AddressSchema,
  payer: AddressSchema,
  payee: AddressSchema,
  /** The deposit, smallest unit. */
  amount: AtomicAmountSchema,
  sessionKeyX: Hex32Schema,
  sessionKeyY: Hex32Schema,
  /** Seconds between a close request and the payer's withdrawal. */
  closeDelay: z.int().min(0).max(MAX_CHANNEL_CLOSE_DELAY),
  salt: Hex32Schema,
  validAfter: UintStringSchema,
  validBefore: UintStringSchema,
  signature: WalletSignatureSchema,
});
export type ChannelOpenRequest = z.infer<typeof ChannelOpenRequestSchema>;

/** A channel as the chain holds it (`GET /channels/:id`; all of it is public on chain). */
export const ChannelStateSchema = z.object({
  channelId: Hex32Schema,
  network: NetworkSchema,
  contract: AddressSchema,
  payer: AddressSchema,
  payee: AddressSchema,
  token: AddressSchema,
  deposit: AtomicAmountSchema,
  claimed: AtomicAmountSchema,
  sessionKeyX: Hex32Schema,
  sessionKeyY: Hex32Schema,
  closeDelay: z.int().nonnegative(),
  /** Unix seconds of the payer's close request; 0 while none. */
  closeRequestedAt: z.int().nonnegative(),
  /** When the payer may withdraw (closeRequestedAt + closeDelay); 0 while no close was requested. */
  closableAt: z.int().nonnegative(),
  closed: z.boolean(),
  /**
   * The salt's first 8 bytes, as the contract keeps them: which of the payee's gates (voucher stores)
   * the channel was opened for (docs/channels.md, "One voucher, one gate"). Present when read from the chain.
   */
  tag: Hex8Schema.optional(),
});
export type ChannelState = z.infer<typeof ChannelStateSchema>;

/** `POST /channels` reply (201; 200 for a repeated request): the open transaction and the channel. */
export const ChannelOpenResponseSchema = z.object({
  channelId: Hex32Schema,
  transaction: Hex32Schema,
  channel: ChannelStateSchema,
});
export type ChannelOpenResponse = z.infer<typeof ChannelOpenResponseSchema>;

/** `POST /channels/:id/close-request`: the payer's EIP-712 RequestClose(channelId, deadline) signature. */
export const ChannelCloseRequestSchema = z.strictObject({
  /** Unix seconds, inclusive. */
  deadline: UintStringSchema,
  signature: WalletSignatureSchema,
});
export type ChannelCloseRequest = z.infer<typeof ChannelCloseRequestSchema>;

/** `POST /channels/:id/close-request` reply. */
export const ChannelCloseRequestResponseSchema = z.object({
  channelId: Hex32Schema,
  /** The relayed transaction; absent when the channel had been asked to close already. */
  transaction: Hex32Schema.optional(),
  closeRequestedAt: z.int().nonnegative(),
  closableAt: z.int().nonnegative(),
});
export type ChannelCloseRequestResponse = z.infer<typeof ChannelCloseRequestResponseSchema>;

/**
 * `POST /channels/:id/close` reply (the payee's API key): a cooperative close with the latest voucher
 * held. `closed` once the transaction confirmed within the request; `closing` when it is still on its
 * way (the webhook `channel.closed` and `GET /channels/:id` tell when it lands).
 */
export const ChannelCloseResponseSchema = z.object({
  channelId: Hex32Schema,
  status: z.enum(["closed", "closing"]),
  transaction: Hex32Schema.optional(),
  /** Paid to the payee over the channel's life. */
  claimed: AtomicAmountSchema.optional(),
  /** Returned to the payer by this close. */
  refunded: AtomicAmountSchema.optional(),
});
export type ChannelCloseResponse = z.infer<typeof ChannelCloseResponseSchema>;

/** What became of one voucher handed over with `POST /channels/vouchers`. */
export const ChannelVoucherResultSchema = z.object({
  channelId: Hex32Schema,
  /**
   * `stored`: now the highest voucher held for the channel; `ignored`: at or below one already held (a
   * resend); `rejected`: not this provider's channel, a bad signature, above the deposit, or closed.
   */
  status: z.enum(["stored", "ignored", "rejected"]),
  reason: z.string().optional(),
});
export type ChannelVoucherResult = z.infer<typeof ChannelVoucherResultSchema>;

/** `POST /channels/vouchers` reply: one result per voucher, in order. */
export const ChannelVouchersResponseSchema = z.object({
  results: z.array(ChannelVoucherResultSchema),
});
export type ChannelVouchersResponse = z.infer<typeof ChannelVouchersResponseSchema>;

/**
 * `POST /channels/:id/top-up`: the payer's EIP-3009 ReceiveWithAuthorization of `amount` to the contract
 * whose nonce is `TollgateChannels.topUpNonce(channelId, salt)` (`signChannelTopUp`), relayed by the
 * facilitator (which pays the gas). The nonce binds the channel; the token refuses a replay.
 */
export const ChannelTopUpRequestSchema = z.strictObject({
  /** Added to the deposit, smallest unit. */
  amount: AtomicAmountSchema,
  salt: Hex32Schema,
  validAfter: UintStringSchema,
  validBefore: UintStringSchema,
  signature: WalletSignatureSchema,
});
export type ChannelTopUpRequest = z.infer<typeof ChannelTopUpRequestSchema>;

/** `POST /channels/:id/top-up` reply (201; 200 when this authorization was relayed before): the channel now. */
export const ChannelTopUpResponseSchema = z.object({
  channelId: Hex32Schema,
  /** The relayed transaction; absent when the authorization had been used already. */
  transaction: Hex32Schema.optional(),
  channel: ChannelStateSchema,
});
export type ChannelTopUpResponse = z.infer<typeof ChannelTopUpResponseSchema>;

/**
 * `POST /channels/:id/withdraw` reply: the payer's unilateral withdrawal once the close delay is over,
 * relayed by the facilitator (anyone may ask: the money only goes to the payer). Also the answer for a
 * channel closed before (cooperatively or by an earlier withdrawal).
 */
export const ChannelWithdrawResponseSchema = z.object({
  channelId: Hex32Schema,
  /** The relayed withdrawal; absent when the channel was closed already. */
  transaction: Hex32Schema.optional(),
  /** Paid to the payee over the channel's life. */
  claimed: AtomicAmountSchema,
  /** Returned to the payer when the channel closed (deposit − claimed). */
  refunded: AtomicAmountSchema,
});
export type ChannelWithdrawResponse = z.infer<typeof ChannelWithdrawResponseSchema>;
