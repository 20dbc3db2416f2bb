/**
 * Request and response bodies of the facilitator's webhook endpoints (docs/webhooks.md), shared by the
 * routes and by `tollgate webhooks`. The delivered event itself is `WebhookEventSchema` in
 * src/protocol/webhook.ts.
 */
import { z } from "zod";
import { WebhookEventTypeSchema } from "../../protocol/webhook.ts";

/** Where deliveries go: http(s), no credentials in the URL (they would show in listings). */
export const WebhookUrlSchema = z
  .url({ protocol: /^https?$/, error: "expected an http(s) URL" })
  .max(2048)
  .refine((text) => {
    const url = new URL(text);
    return url.username === "" && url.password === "";
  }, "the URL must not carry credentials");

export const CreateWebhookRequestSchema = z.strictObject({
  url: WebhookUrlSchema,
  /** Event types to receive; omitted means every type, including types added later. */
  events: z
    .array(WebhookEventTypeSchema)
    .min(1)
    .max(WebhookEventTypeSchema.options.length)
    .refine((types) => new Set(types).size === types.length, "event types must not repeat")
    .optional(),
  description: z.string().max(500).optional(),
});
export type CreateWebhookRequest = z.infer<typeof CreateWebhookRequestSchema>;

/** A registered endpoint as listed (the secret is never listed). */
export const WebhookEndpointSchema = z.object({
  id: z.string(),
  url: z.string(),
  /** `null`: every event type. */
  events: z.array(WebhookEventTypeSchema).nullable(),
  description: z.string().nullable(),
  createdAt: z.iso.datetime(),
  /** While a rotated-out secret still signs deliveries: until when (ISO time). */
  previousSecretExpiresAt: z.iso.datetime().nullable(),
});
export type WebhookEndpoint = z.infer<typeof WebhookEndpointSchema>;

/** `POST /webhooks` reply: the endpoint and its signing secret, shown this once. */
export const CreateWebhookResponseSchema = WebhookEndpointSchema.extend({
  secret: z.string().startsWith("whsec_"),
});
export type CreateWebhookResponse = z.infer<typeof CreateWebhookResponseSchema>;

export const ListWebhooksResponseSchema = z.object({ webhooks: z.array(WebhookEndpointSchema) });
export type ListWebhooksResponse = z.infer<typeof ListWebhooksResponseSchema>;

export const DeleteWebhookResponseSchema = z.object({ id: z.string(), deleted: z.literal(true) });
export type DeleteWebhookResponse = z.infer<typeof DeleteWebhookResponseSchema>;

/** `POST /webhooks/:id/rotate-secret`: how long the old secret keeps signing (default one day). */
export const RotateWebhookSecretRequestSchema = z.strictObject({
  graceSeconds: z
    .int()
    .min(0)
    .max(7 * 86_400)
    .optional(),
});
export type RotateWebhookSecretRequest = z.infer<typeof RotateWebhookSecretRequestSchema>;

export const RotateWebhookSecretResponseSchema = z.object({
  id: z.string(),
  secret: z.string().startsWith("whsec_"),
  previousSecretExpiresAt: z.iso.datetime().nullable(),
});
export type RotateWebhookSecretResponse = z.infer<typeof RotateWebhookSecretResponseSchema>;

export const WebhookDeliveryStatusSchema = z.enum(["pending", "sending", "delivered", "dead"]);
export type WebhookDeliveryStatus = z.infer<typeof WebhookDeliveryStatusSchema>;

/** One HTTP attempt. `statusCode` is null when no response came back (refused, timed out). */
export const WebhookAttemptSchema = z.object({
  at: z.iso.datetime(),
  statusCode: z.int().nullable(),
  error: z.string().nullable(),
  durationMs: z.int().nullable(),
});
export type WebhookAttempt = z.infer<typeof WebhookAttemptSchema>;

export const WebhookDeliverySchema = z.object({
  /** Decimal id of the delivery (for `…/deliveries/:deliveryId/retry`). */
  id: z.string().regex(/^[0-9]+$/),
  /** The event's id as delivered (`evt_…`): the receiver's de-duplication key. */
  eventId: z.string(),
  eventType: z.string(),
  status: WebhookDeliveryStatusSchema,
  /** Attempts since the delivery was queued (or requeued). */
  attempts: z.int().nonnegative(),
  /** When the next attempt is due; null once delivered or dead. */
  nextAttemptAt: z.iso.datetime().nullable(),
  deliveredAt: z.iso.datetime().nullable(),
  createdAt: z.iso.datetime(),
  /** Most recent attempts first. */
  history: z.array(WebhookAttemptSchema),
});
export type WebhookDelivery = z.infer<typeof WebhookDeliverySchema>;

export const ListWebhookDeliveriesQuerySchema = z.object({
  status: WebhookDeliveryStatusSchema.optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  /** Page backwards: deliveries with an id below this one. */
  before: z
    .string()
    .regex(/^[0-9]{1,15}$/)
    .optional(),
});
export type ListWebhookDeliveriesQuery = z.infer<typeof ListWebhookDeliveriesQuerySchema>;

export const ListWebhookDeliveriesResponseSchema = z.object({ deliveries: z.array(WebhookDeliverySchema) });
export type ListWebhookDeliveriesResponse = z.infer<typeof ListWebhookDeliveriesResponseSchema>;

export const RetryWebhookDeliveryResponseSchema = z.object({ delivery: WebhookDeliverySchema });
export type RetryWebhookDeliveryResponse = z.infer<typeof RetryWebhookDeliveryResponseSchema>;
