/**
 * The channel scheme's own headers, read and written by both its sides: the payer's wallet and fetch,
 * and the seller's gate (the voucher itself, `X-Tollgate-Channel`, is wire format: protocol/channelVoucher.ts).
 */

/** Gate → client, on a channel-paid answer and on a channel refusal: `<channelId>.<highest>.<spent>`. */
export const CHANNEL_RECEIPT_HEADER = "X-Tollgate-Channel-Receipt";

/** Payer → gate: close this channel cooperatively now (the payer asked to close on chain first). */
export const CHANNEL_CLOSE_HEADER = "X-Tollgate-Channel-Close";
