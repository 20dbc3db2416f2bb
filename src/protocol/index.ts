/**
 * `tollgate/protocol`: Tollgate's wire formats (docs/protocol.md) — zod schemas, header codecs, amounts,
 * networks and the error catalogue. Pure: no I/O, no clock reads, nothing imported from other modules.
 */
export * from "./address.ts";
export * from "./amount.ts";
export * from "./base64.ts";
export * from "./canonicalJson.ts";
export * from "./channelVoucher.ts";
export * from "./clock.ts";
export * from "./errors.ts";
export * from "./facilitator.ts";
export * from "./header.ts";
export * from "./manifest.ts";
export * from "./mcpPayment.ts";
export * from "./memo.ts";
export * from "./network.ts";
export * from "./parseWire.ts";
export * from "./payerReadAuth.ts";
export * from "./paymentProof.ts";
export * from "./paymentRequired.ts";
export * from "./signedPayment.ts";
export * from "./subscriptionAuth.ts";
export * from "./webhook.ts";
export * from "./x402.ts";
