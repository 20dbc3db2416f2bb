import { createHmac } from "node:crypto";
import { formatWebhookSignature, webhookSigningInput } from "../../protocol/webhook.ts";

/**
 * The `Tollgate-Signature` value for one delivery: `t=<unix>,v1=<hex hmacSha256(secret, t + "." + body)>`,
 * with one `v1` per secret (the current one first, then a rotated-out one still in its grace period).
 */
export function signWebhookPayload(secrets: readonly string[], timestamp: number, body: string): string {
  const [first, ...rest] = secrets;
  if (first === undefined) throw new TypeError("signWebhookPayload needs at least one secret");
  const input = webhookSigningInput(timestamp, body);
  const mac = (secret: string) => createHmac("sha256", secret).update(input, "utf8").digest("hex");
  return [formatWebhookSignature(timestamp, mac(first)), ...rest.map((s) => `v1=${mac(s)}`)].join(",");
}
