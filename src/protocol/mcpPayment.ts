/**
 * Payments over the Model Context Protocol (docs/mcp.md): the `_meta` keys a paid tool call carries,
 * following x402's "Transport: MCP" and extending it with Tollgate's own credentials.
 *
 * - Payment required: a tool result with `isError: true` whose `structuredContent` (and
 *   `content[0].text`, as JSON) is the x402 `PaymentRequired`; a Tollgate seller adds its full 402
 *   body (docs/protocol.md, "402 body": memos, subscription plans) under `_meta["tollgate/payment-required"]`.
 *   Earlier x402 drafts answered a JSON-RPC error with code 402 and the requirements in `error.data`;
 *   buyers accept both.
 * - The retry carries one credential in `params._meta`: `x402/payment` (an x402 `PaymentPayload`
 *   object), `tollgate/payment` (a facilitator proof, exactly the `X-PAYMENT` value),
 *   `tollgate/subscription` (`{ id, auth }`: the `X-Tollgate-Sub` id and its sub-auth token), or
 *   `tollgate/channel` (a channel voucher, exactly the `X-Tollgate-Channel` value).
 * - A paid result carries the settlement in `result._meta["x402/payment-response"]`, and a metered
 *   call's counted units and overage in `_meta["tollgate/usage"]`.
 * - Any other refusal is `isError: true` with the error body (docs/protocol.md, "Errors") as `structuredContent` and its
 *   HTTP status under `_meta["tollgate/error"]`, so a buyer treats it as it treats the HTTP answer.
 *
 * `_meta` comes from whoever calls: every value is bounded and schema-checked before use.
 */
import { z } from "zod";
import { MAX_CHANNEL_VOUCHER_HEADER } from "./channelVoucher.ts";
import { MAX_HEADER_BYTES } from "./header.ts";

/** The `_meta` keys of paid MCP tool calls. */
export const McpMetaKey = {
  /** Client → server: an x402 v2 `PaymentPayload` (object). */
  X402Payment: "x402/payment",
  /** Server → client: the x402 `SettlementResponse` of the payment the call was served on. */
  X402PaymentResponse: "x402/payment-response",
  /** Client → server: a Tollgate payment proof, as `X-PAYMENT` carries it (base64 of its JSON). */
  TollgatePayment: "tollgate/payment",
  /** Client → server: `{ id, auth }`, a subscription id and its sub-auth token (docs/protocol.md, "Subscription requests"). */
  TollgateSubscription: "tollgate/subscription",
  /** Client → server: a payment-channel voucher, as `X-Tollgate-Channel` carries it (docs/channels.md). */
  TollgateChannel: "tollgate/channel",
  /** Server → client: the gate's channel receipt, as `X-Tollgate-Channel-Receipt` carries it. */
  TollgateChannelReceipt: "tollgate/channel-receipt",
  /** Server → client, on payment required: the Tollgate 402 body (docs/protocol.md, "402 body"). */
  TollgatePaymentRequired: "tollgate/payment-required",
  /** Server → client, on a metered call: `{ units, overage }` as the gate counted them. */
  TollgateUsage: "tollgate/usage",
  /** Server → client, on a refusal other than payment required: `{ status, retryAfter? }`. */
  TollgateError: "tollgate/error",
  /** Server → client, in `tools/list`: a paid tool's listed pricing (manifest pricing entries). */
  TollgatePricing: "tollgate/pricing",
} as const;

/** The JSON-RPC error code earlier x402 MCP drafts answered an unpaid call with. */
export const MCP_PAYMENT_REQUIRED_CODE = 402;

/** Most bytes of one credential's JSON text: the header bound, as the same value rides in a header. */
export const MAX_MCP_CREDENTIAL_BYTES = MAX_HEADER_BYTES;

/** A JSON value whose text fits `maxBytes` (a cheap guard before any schema walks it). */
function boundedJson(maxBytes: number) {
  return z.unknown().superRefine((value, ctx) => {
    let text: string | undefined;
    try {
      text = JSON.stringify(value);
    } catch {
      text = undefined;
    }
    if (text === undefined || new TextEncoder().encode(text).length > maxBytes) {
      ctx.addIssue({ code: "custom", message: `expected a JSON value of at most ${maxBytes} bytes` });
    }
  });
}

/** `tollgate/subscription`: the decimal on-chain id and the sub-auth token for it. */
export const McpSubscriptionCredentialSchema = z.strictObject({
  id: z.string().regex(/^[0-9]{1,78}$/, { error: "expected a decimal subscription id" }),
  auth: z.string().min(1).max(4096),
});
export type McpSubscriptionCredential = z.infer<typeof McpSubscriptionCredentialSchema>;

/**
 * The payment credentials a tool call's `_meta` may carry; other `_meta` keys (progress tokens, …)
 * are not ours and pass untouched. At most one credential is read: a call naming two is refused.
 */
export const McpPaymentMetaSchema = z
  .looseObject({
    [McpMetaKey.X402Payment]: boundedJson(MAX_MCP_CREDENTIAL_BYTES)
      .pipe(z.record(z.string(), z.unknown()))
      .optional(),
    [McpMetaKey.TollgatePayment]: z.string().min(1).max(MAX_MCP_CREDENTIAL_BYTES).optional(),
    [McpMetaKey.TollgateSubscription]: McpSubscriptionCredentialSchema.optional(),
    [McpMetaKey.TollgateChannel]: z.string().min(1).max(MAX_CHANNEL_VOUCHER_HEADER).optional(),
  })
  .refine(
    (meta) =>
      [
        meta[McpMetaKey.X402Payment],
        meta[McpMetaKey.TollgatePayment],
        meta[McpMetaKey.TollgateSubscription],
        meta[McpMetaKey.TollgateChannel],
      ].filter((given) => given !== undefined).length <= 1,
    {
      error: "give at most one of x402/payment, tollgate/payment, tollgate/subscription and tollgate/channel",
    },
  );
export type McpPaymentMeta = z.infer<typeof McpPaymentMetaSchema>;

/** `tollgate/usage`: what a metered call counted and was charged (smallest units, decimal). */
export const McpUsageSchema = z.strictObject({
  units: z.string().regex(/^[0-9]{1,20}$/),
  overage: z.string().regex(/^[0-9]{1,78}$/),
});
export type McpUsage = z.infer<typeof McpUsageSchema>;

/** `tollgate/error`: the HTTP status a refusal would have had, and how long to wait (429, 503). */
export const McpErrorMetaSchema = z.looseObject({
  status: z.int().min(400).max(599),
  retryAfter: z.int().nonnegative().max(86_400).optional(),
});
export type McpErrorMeta = z.infer<typeof McpErrorMetaSchema>;
