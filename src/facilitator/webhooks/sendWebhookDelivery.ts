/**
 * One attempt of a claimed webhook delivery (createWebhookWorker.ts): sign the event with the endpoint's
 * secrets, check the target again and POST to the checked address, then record the outcome and when
 * the delivery is due again under the lease it was claimed with.
 */
import type { Logger } from "pino";
import type { WebhookTargetPolicy } from "../../http/webhookTargets.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { WEBHOOK_SIGNATURE_HEADER, type WebhookEvent } from "../../protocol/webhook.ts";
import type { Store } from "../../store/store.ts";
import { webhookEventId } from "./createWebhookRepository.ts";
import { sanitizeStatusText, type WebhookFetch } from "./pinnedWebhookFetch.ts";
import { signWebhookPayload } from "./signWebhookPayload.ts";
import { type WebhookRetryPolicy, webhookBackoff } from "./webhookBackoff.ts";
import { recordWebhookAttempt, type WebhookSendRow } from "./webhookOutboxRecords.ts";
import type { WebhookSecretBox } from "./webhookSecretBox.ts";

export type WebhookDeliveryOutcome = "delivered" | "retry" | "dead";

/** What sending a delivery needs: the worker's effects and its checked settings. */
export type WebhookSender = {
  store: Store;
  clock: Clock;
  log: Logger;
  fetch: WebhookFetch;
  targets: WebhookTargetPolicy;
  secrets: WebhookSecretBox;
  random: () => number;
  retry: WebhookRetryPolicy;
  timeoutMs: number;
  onAttempt?: ((outcome: WebhookDeliveryOutcome) => void) | undefined;
};

/** An attempt's answer: the status code if one came, and the error if it was not a success. */
type AttemptResult = { statusCode: number | null; error: string | null };

/** Characters of an attempt's error kept in the delivery history (never a response body). */
const MAX_ERROR_LENGTH = 200;

/** `sendWebhookDelivery`, with a store fault while recording logged as a lost attempt. */
export async function sendWebhookDeliverySafely(
  sender: WebhookSender,
  row: WebhookSendRow,
  lease: string,
): Promise<WebhookDeliveryOutcome | "lost"> {
  try {
    return await sendWebhookDelivery(sender, row, lease);
  } catch (cause) {
    // A store fault while recording: the lease expires and the delivery is sent again.
    sender.log.error({ err: cause, delivery: row.id }, "could not record a webhook attempt");
    return "lost";
  }
}

/** Attempts `row` once and records the outcome; "lost" when the lease went to another worker meanwhile. */
export async function sendWebhookDelivery(
  sender: WebhookSender,
  row: WebhookSendRow,
  lease: string,
): Promise<WebhookDeliveryOutcome | "lost"> {
  const { clock } = sender;
  const attemptedAt = clock.now();
  const event = webhookEventOf(row);
  const body = JSON.stringify(event);
  const signing = openSigningSecrets(sender, row, attemptedAt);
  const { statusCode, error } =
    signing.error === null
      ? await postWebhookEvent(sender, row.url, signing.secrets, body)
      : { statusCode: null, error: signing.error };
  const { outcome, nextAttemptAt } = scheduleAfterAttempt(sender, row.attempts, error === null, attemptedAt);
  const recorded = await recordWebhookAttempt(sender.store, {
    deliveryId: row.id,
    lease,
    status: outcome === "retry" ? "pending" : outcome,
    nextAttemptAt,
    attemptedAt,
    finishedAt: clock.now(),
    statusCode,
    error,
  });
  if (!recorded) return "lost";
  if (outcome === "dead") {
    sender.log.warn(
      { delivery: row.id, event: event.id, url: row.url, error },
      "webhook delivery is a dead letter",
    );
  } else if (outcome === "retry") {
    sender.log.info(
      { delivery: row.id, event: event.id, attempt: row.attempts, error },
      "webhook delivery failed",
    );
  }
  sender.onAttempt?.(outcome);
  return outcome;
}

function webhookEventOf(row: WebhookSendRow): WebhookEvent {
  return {
    id: webhookEventId(row.event_id),
    type: row.event_type,
    created: Math.floor(row.event_created_at.getTime() / 1000),
    data: row.event_data,
  };
}

/**
 * The endpoint's secrets to sign with: its current one, and the rotated-out one while its grace
 * period lasts. A current secret no key opens is the attempt's error.
 */
function openSigningSecrets(
  sender: WebhookSender,
  row: WebhookSendRow,
  attemptedAt: number,
): { secrets: string[]; error: string | null } {
  const secrets: string[] = [];
  let error: string | null = null;
  try {
    secrets.push(sender.secrets.open(row.secret, row.endpoint_id));
  } catch (cause) {
    // No key opens it: a failed attempt (retried, so configuring the key or rotating the secret heals it).
    error = sanitizeError(cause instanceof Error ? cause.message : "cannot open the endpoint's secret");
  }
  if (row.previous_secret !== null && (row.previous_secret_expires_at?.getTime() ?? 0) > attemptedAt) {
    try {
      secrets.push(sender.secrets.open(row.previous_secret, row.endpoint_id));
    } catch (cause) {
      sender.log.warn(
        { err: cause, webhook: row.endpoint_id },
        "cannot sign with the rotated-out webhook secret",
      );
    }
  }
  return { secrets, error };
}

/** Checks the target and POSTs the signed body to the checked address; a 2xx is the only success. */
async function postWebhookEvent(
  sender: WebhookSender,
  url: string,
  secrets: string[],
  body: string,
): Promise<AttemptResult> {
  let statusCode: number | null = null;
  try {
    // Checked on every attempt, not only at registration: the name may resolve elsewhere by now.
    const target = await sender.targets.check(url);
    const response = await sender.fetch(
      url,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "Tollgate-Webhooks/1",
          [WEBHOOK_SIGNATURE_HEADER]: signWebhookPayload(secrets, unixSeconds(sender.clock), body),
        },
        body,
        // A redirect is not a delivery: the receiver must give its final URL.
        redirect: "manual",
        signal: AbortSignal.timeout(sender.timeoutMs),
      },
      target,
    );
    statusCode = response.status;
    // Only the status line is kept: the body of whatever answered is not the provider's to read
    // (it may be an internal service's reply) and never reaches the store or the logs.
    await response.body?.cancel().catch(() => {});
    if (statusCode < 200 || statusCode > 299) {
      const reason = sanitizeStatusText(response.statusText);
      return { statusCode, error: `HTTP ${statusCode}${reason === "" ? "" : ` ${reason}`}` };
    }
    return { statusCode, error: null };
  } catch (cause) {
    return { statusCode, error: describeFetchError(cause, sender.timeoutMs) };
  }
}

/**
 * The retry schedule: a failed attempt is retried after a backoff until the delivery has had its
 * `maxAttempts`, then it is a dead letter. A finished delivery's next time is the attempt's own.
 */
function scheduleAfterAttempt(
  sender: WebhookSender,
  attempts: number,
  delivered: boolean,
  attemptedAt: number,
): { outcome: WebhookDeliveryOutcome; nextAttemptAt: number } {
  const dead = !delivered && attempts >= sender.retry.maxAttempts;
  const outcome: WebhookDeliveryOutcome = delivered ? "delivered" : dead ? "dead" : "retry";
  const nextAttemptAt =
    delivered || dead ? attemptedAt : attemptedAt + webhookBackoff(attempts, sender.retry, sender.random);
  return { outcome, nextAttemptAt };
}

function describeFetchError(cause: unknown, timeoutMs: number): string {
  if (cause instanceof Error && (cause.name === "TimeoutError" || cause.name === "AbortError")) {
    return `no response within ${timeoutMs} ms`;
  }
  if (cause instanceof TollgateError) {
    const reason = (cause.details as { reason?: unknown } | undefined)?.reason;
    return sanitizeError(`refused: ${typeof reason === "string" ? `${reason}: ` : ""}${cause.message}`);
  }
  if (cause instanceof Error) {
    const own = cause as { code?: unknown };
    const inner = cause.cause as { code?: unknown; message?: unknown } | undefined;
    const code = typeof own.code === "string" ? own.code : typeof inner?.code === "string" ? inner.code : "";
    return sanitizeError(code === "" ? cause.message : `${cause.message}: ${code}`);
  }
  return "request failed";
}

/** What an attempt's `error` may hold: one line of printable ASCII, bounded. */
function sanitizeError(text: string): string {
  return text
    .replace(/[^\x20-\x7e]+/g, " ")
    .trim()
    .slice(0, MAX_ERROR_LENGTH);
}
