/**
 * Webhook signing secrets at rest (docs/webhooks.md, "Secrets at rest"). The facilitator must be able to sign with a
 * secret, so a hash will not do: secrets are sealed with AES-256-GCM under a key that is kept out of
 * the database (`TOLLGATE_WEBHOOK_KEYS`, or a 0600 key file beside it), so a copy of the database, its
 * WAL or a backup holds no usable secret.
 *
 * Sealed form: `tgs1.<kid>.<base64url(iv ‖ ciphertext ‖ tag)>`, with a fresh 12-byte iv per seal and the
 * endpoint id as additional data, so a sealed secret copied onto another endpoint's row does not open.
 * `kid` (8 hex digits of a hash of the key) names the key that sealed it: several keys may be given,
 * the first seals and every one opens, which is how a key is rotated (see docs/webhooks.md).
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { base64UrlDecode, base64UrlEncode } from "../../protocol/base64.ts";
import { TollgateError } from "../../protocol/errors.ts";

const PREFIX = "tgs1";
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** A secret as first issued (before sealing existed): only found in rows written before 0064. */
const PLAINTEXT_PREFIX = "whsec_";

export type WebhookSecretBox = {
  /** The id of the sealing key (the first one). */
  readonly kid: string;
  /** Seals `secret` for the endpoint `endpointId`. */
  seal(secret: string, endpointId: string): string;
  /**
   * The secret in `stored` (sealed by any configured key, or a plaintext value from before sealing).
   * Throws `Internal` when it was sealed by a key that is not configured or does not open.
   */
  open(stored: string, endpointId: string): string;
  /** True when `stored` should be sealed again: plaintext, or sealed by a key other than the first. */
  needsReseal(stored: string): boolean;
};

/** 8 hex digits naming a key; not secret (a one-way hash of it). */
function keyId(key: Uint8Array): string {
  return createHash("sha256").update("tollgate webhook secret key\0").update(key).digest("hex").slice(0, 8);
}

/**
 * A box over `keys` (each 32 bytes; the first seals).
 * @example
 * const box = createWebhookSecretBox([parseWebhookSecretKey(env.TOLLGATE_WEBHOOK_KEYS)]);
 * const stored = box.seal("whsec_…", "we_…"); // tgs1.1a2b3c4d.…
 */
export function createWebhookSecretBox(keys: readonly Uint8Array[]): WebhookSecretBox {
  if (keys.length === 0) throw new TypeError("a webhook secret box needs at least one key");
  const byId = new Map<string, Uint8Array>();
  for (const key of keys) {
    if (key.length !== 32) throw new TypeError("a webhook secret key is 32 bytes");
    byId.set(keyId(key), key);
  }
  const sealing = keys[0]!;
  const kid = keyId(sealing);

  return {
    kid,
    seal(secret, endpointId) {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv("aes-256-gcm", sealing, iv);
      cipher.setAAD(Buffer.from(endpointId, "utf8"));
      const data = Buffer.concat([iv, cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
      return `${PREFIX}.${kid}.${base64UrlEncode(data)}`;
    },
    open(stored, endpointId) {
      if (stored.startsWith(PLAINTEXT_PREFIX)) return stored;
      const [prefix, id, payload] = stored.split(".");
      if (prefix !== PREFIX || id === undefined || payload === undefined) {
        throw new TollgateError("Internal", "a stored webhook secret has an unknown format");
      }
      const key = byId.get(id);
      if (key === undefined) {
        throw new TollgateError(
          "Internal",
          `the webhook secret was sealed with key ${id}, which is not configured (TOLLGATE_WEBHOOK_KEYS); configure it, or rotate the endpoint's secret`,
          { details: { reason: "unknown_secret_key", kid: id } },
        );
      }
      try {
        const data = base64UrlDecode(payload);
        const decipher = createDecipheriv("aes-256-gcm", key, data.subarray(0, IV_BYTES));
        decipher.setAAD(Buffer.from(endpointId, "utf8"));
        decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
        return Buffer.concat([
          decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)),
          decipher.final(),
        ]).toString("utf8");
      } catch (cause) {
        throw new TollgateError("Internal", "a stored webhook secret does not open with its key", { cause });
      }
    },
    needsReseal(stored) {
      return !stored.startsWith(`${PREFIX}.${kid}.`);
    },
  };
}

/** A key from configuration: 32 bytes as base64url or 0x-hex. */
export function parseWebhookSecretKey(text: string): Uint8Array {
  const value = text.trim();
  const bytes = /^0x[0-9a-fA-F]{64}$/.test(value)
    ? Uint8Array.from(Buffer.from(value.slice(2), "hex"))
    : /^[A-Za-z0-9_-]{43}$/.test(value)
      ? base64UrlDecode(value)
      : undefined;
  if (bytes === undefined || bytes.length !== 32) {
    throw new TollgateError(
      "InvalidRequest",
      "a webhook secret key is 32 bytes, written as 43 base64url characters or 0x and 64 hex digits",
      { details: { reason: "bad_webhook_secret_key" } },
    );
  }
  return bytes;
}

/** A fresh key, as `parseWebhookSecretKey` reads it. */
export function generateWebhookSecretKey(random: (size: number) => Uint8Array = randomBytes): string {
  return base64UrlEncode(random(32));
}
