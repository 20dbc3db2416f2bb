/**
 * Webhook wire format (docs/webhooks.md): the event envelope and the `Tollgate-Signature` header,
 * `t=<unix seconds>,v1=<hex hmacSha256(secret, t + "." + body)>`. The HMAC itself is computed by the
 * facilitator and by receivers; this module fixes the text both sides agree on.
 */
import { z } from "zod";
import { TollgateError } from "./errors.ts";

export const WEBHOOK_SIGNATURE_HEADER = "Tollgate-Signature";

/** Event types a facilitator delivers. */
export const WebhookEventTypeSchema = z.enum([
  "payment.settled",
  "payment.failed",
  "subscription.created",
  "subscription.renewed",
  "subscription.renewal_failed",
  "subscription.paused",
  "subscription.resumed",
  "subscription.cancelled",
  "allowance.deducted",
  "allowance.exhausted",
  "plan.created",
  "plan.deprecated",
  "channel.opened",
  "channel.claimed",
  "channel.claim_failed",
  "channel.close_requested",
  "channel.closed",
  "token.paused",
  "token.unpaused",
  "event.undone",
  "event.restored",
]);
export type WebhookEventType = z.infer<typeof WebhookEventTypeSchema>;

/**
 * Events about the settlement token itself: they concern every provider, so each endpoint subscribed to
 * them gets them (the others go to the provider the event names).
 */
export const TokenWebhookEventTypes = [
  "token.paused",
  "token.unpaused",
] as const satisfies readonly WebhookEventType[];

/** `data` of `token.paused`: the token's issuer paused it; settlement in it is held until it is unpaused. */
export const TokenPausedEventDataSchema = z.object({
  network: z.string(),
  token: z.string(),
  /** When the facilitator first saw the token paused, Unix seconds. */
  since: z.int().nonnegative(),
});
export type TokenPausedEventData = z.infer<typeof TokenPausedEventDataSchema>;

/** `data` of `token.unpaused`: the held payments, renewals, deductions and claims settle now. */
export const TokenUnpausedEventDataSchema = z.object({
  network: z.string(),
  token: z.string(),
  /** The `since` of the pause that ended, Unix seconds. */
  pausedSince: z.int().nonnegative(),
  /** When the facilitator first saw the token unpaused, Unix seconds. */
  unpausedAt: z.int().nonnegative(),
});
export type TokenUnpausedEventData = z.infer<typeof TokenUnpausedEventDataSchema>;

/**
 * A delivered event. Delivery is at least once: receivers de-duplicate on `id`. `data` depends on
 * `type` and holds wire values only (decimal strings for amounts and ids).
 */
export const WebhookEventSchema = z.object({
  id: z.string().min(1).max(128),
  type: WebhookEventTypeSchema,
  /** When the event happened, Unix seconds. */
  created: z.int().nonnegative(),
  data: z.record(z.string(), z.unknown()),
});
export type WebhookEvent = z.infer<typeof WebhookEventSchema>;

/** The HMAC input for a delivery: `<t>.<raw body>`, signed as UTF-8. */
export function webhookSigningInput(timestamp: number, body: string): string {
  return `${timestamp}.${body}`;
}

/** The header value for one delivery: `t=<unix>,v1=<hex>`. */
export function formatWebhookSignature(timestamp: number, hexMac: string): string {
  return `t=${timestamp},v1=${hexMac.toLowerCase()}`;
}

/**
 * Parses a `Tollgate-Signature` value into its timestamp and the `v1` MACs it lists (several while a
 * secret is being rotated). Unknown schemes (`v0=…`) are ignored. Throws `InvalidSignature`.
 */
export function parseWebhookSignature(header: string): { timestamp: number; v1: string[] } {
  const refuse = (reason: string): never => {
    throw new TollgateError("InvalidSignature", `malformed ${WEBHOOK_SIGNATURE_HEADER}: ${reason}`);
  };
  if (typeof header !== "string" || header.length > 1024) return refuse("absent or too long");
  let timestamp: number | undefined;
  const v1: string[] = [];
  for (const item of header.split(",")) {
    const eq = item.indexOf("=");
    if (eq <= 0) return refuse("expected key=value items");
    const key = item.slice(0, eq).trim();
    const value = item.slice(eq + 1).trim();
    if (key === "t") {
      if (timestamp !== undefined || !/^[0-9]{1,15}$/.test(value)) return refuse("bad t");
      timestamp = Number(value);
    } else if (key === "v1") {
      if (!/^[0-9a-fA-F]{64}$/.test(value)) return refuse("bad v1");
      v1.push(value.toLowerCase());
    }
  }
  if (timestamp === undefined) return refuse("missing t");
  if (v1.length === 0) return refuse("missing v1");
  return { timestamp, v1 };
}
