/**
 * Receiver side of Tollgate webhooks (docs/webhooks.md): checks a delivery's `Tollgate-Signature` against
 * the endpoint's secret(s) and returns the event it carries.
 *
 * The signed text is `<t>.<raw body>`, so the body must be the exact bytes received, before any JSON
 * parsing or re-serialisation by a framework.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  parseWebhookSignature,
  WEBHOOK_SIGNATURE_HEADER,
  type WebhookEvent,
  WebhookEventSchema,
} from "../protocol/webhook.ts";

/** Why a delivery was refused. */
export type WebhookRefusal = "malformed_header" | "stale_timestamp" | "signature_mismatch" | "malformed_body";

/** A delivery that must not be trusted. Code `InvalidSignature`; `reason` says which check failed. */
export class WebhookVerificationError extends TollgateError {
  override readonly name = "WebhookVerificationError";
  readonly reason: WebhookRefusal;

  constructor(
    reason: WebhookRefusal,
    message: string,
    options: { cause?: unknown; details?: Record<string, unknown> } = {},
  ) {
    super("InvalidSignature", message, { details: { reason, ...options.details }, cause: options.cause });
    this.reason = reason;
  }
}

/** Request headers as a web `Headers`, a Node `req.headers` record, or the signature header's value itself. */
export type WebhookHeaders =
  | Headers
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | string;

export type VerifyWebhookOptions = {
  /** Largest accepted distance between the signature's `t` and now, either way (default 300 s). */
  toleranceSeconds?: number | undefined;
  clock: Clock;
};

const DEFAULT_TOLERANCE_SECONDS = 300;

/**
 * Verifies a webhook delivery and returns its event, or throws `WebhookVerificationError` for a
 * malformed header, a timestamp outside the tolerance, a signature made with none of `secret`, or a
 * body that is not a Tollgate event. Pass several secrets while rotating: a delivery signed with any of
 * them is accepted. Deliveries are at least once: de-duplicate on `event.id`.
 *
 * @example
 * app.post("/hooks/tollgate", async (c) => {
 *   const event = verifyWebhook(env.TOLLGATE_WEBHOOK_SECRET, c.req.raw.headers, await c.req.text(),
 *     { clock: systemClock });
 *   if (await seen(event.id)) return c.body(null, 200);
 *   …
 * });
 */
export function verifyWebhook(
  secret: string | readonly string[],
  headers: WebhookHeaders,
  body: string | Uint8Array,
  options: VerifyWebhookOptions,
): WebhookEvent {
  const secrets = typeof secret === "string" ? [secret] : [...secret];
  if (secrets.length === 0 || secrets.some((s) => typeof s !== "string" || s.length === 0)) {
    throw new TypeError("verifyWebhook needs at least one non-empty secret");
  }
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (!Number.isSafeInteger(tolerance) || tolerance < 0) {
    throw new TypeError("toleranceSeconds must be a non-negative integer");
  }

  const header = signatureHeaderOf(headers);
  if (header === undefined) {
    throw new WebhookVerificationError("malformed_header", `missing ${WEBHOOK_SIGNATURE_HEADER} header`);
  }
  let parsed: { timestamp: number; v1: string[] };
  try {
    parsed = parseWebhookSignature(header);
  } catch (cause) {
    throw new WebhookVerificationError(
      "malformed_header",
      cause instanceof Error ? cause.message : `malformed ${WEBHOOK_SIGNATURE_HEADER}`,
      { cause },
    );
  }

  // The timestamp is inside the MAC, so a replayed delivery cannot be given a fresh one.
  const now = unixSeconds(options.clock);
  if (Math.abs(now - parsed.timestamp) > tolerance) {
    throw new WebhookVerificationError(
      "stale_timestamp",
      `signature timestamp is more than ${tolerance} s away from now`,
      { details: { timestamp: parsed.timestamp, now } },
    );
  }

  const bodyBytes = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const received = parsed.v1.map((hex) => Buffer.from(hex, "hex"));
  let matched = false;
  // Every pair is compared (no early exit) in constant time per comparison.
  for (const s of secrets) {
    const expected = createHmac("sha256", s)
      .update(`${parsed.timestamp}.`, "utf8")
      .update(bodyBytes)
      .digest();
    for (const mac of received) {
      if (mac.length === expected.length && timingSafeEqual(mac, expected)) matched = true;
    }
  }
  if (!matched) {
    throw new WebhookVerificationError("signature_mismatch", "no signature matches the webhook secret");
  }

  let json: unknown;
  try {
    json = JSON.parse(bodyBytes.toString("utf8"));
  } catch (cause) {
    throw new WebhookVerificationError("malformed_body", "webhook body is not JSON", { cause });
  }
  const event = WebhookEventSchema.safeParse(json);
  if (!event.success) {
    throw new WebhookVerificationError("malformed_body", "webhook body is not a Tollgate event", {
      cause: event.error,
    });
  }
  return event.data;
}

function signatureHeaderOf(headers: WebhookHeaders): string | undefined {
  if (typeof headers === "string") return headers;
  if (headers instanceof Headers) return headers.get(WEBHOOK_SIGNATURE_HEADER) ?? undefined;
  const wanted = WEBHOOK_SIGNATURE_HEADER.toLowerCase();
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() !== wanted || value === undefined) continue;
    // A repeated header is ambiguous: refuse rather than pick one.
    if (typeof value === "string") return value;
    return value.length === 1 ? value[0] : "";
  }
  return undefined;
}
