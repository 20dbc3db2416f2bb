/**
 * The webhook settings of `tollgate facilitator` (read by loadFacilitatorConfig):
 *
 * - `TOLLGATE_WEBHOOK_KEYS`: keys that seal webhook secrets at rest (32 bytes each, base64url or
 *   0x-hex, comma-separated; the first seals, every one opens). Unset, a key is generated once into
 *   `<TOLLGATE_DIR>/webhook-secret-key` (0600), a file apart from the database. Several instances sharing
 *   one PostgreSQL must share the keys: set the variable on all of them.
 * - `TOLLGATE_WEBHOOK_ALLOW_TARGETS` (`--webhook-allow-targets`): non-public addresses webhooks may go
 *   to anyway, as CIDRs or addresses (`127.0.0.0/8,::1` for receivers on the same machine). Unset
 *   (the default), loopback, link-local, private and reserved targets are refused.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { createWebhookTargetPolicy } from "../../http/webhookTargets.ts";
import { ensurePrivateDir, tightenPrivateFile, writePrivateFile } from "../../store/privateFiles.ts";
import { CommaListSchema } from "../commaListSchema.ts";
import { generateWebhookSecretKey, parseWebhookSecretKey } from "./webhookSecretBox.ts";

/** The environment variables, as part of the facilitator's environment schema. */
export const WebhookEnvSchema = z.object({
  TOLLGATE_WEBHOOK_KEYS: z.string().optional(),
  TOLLGATE_WEBHOOK_ALLOW_TARGETS: CommaListSchema.refine(
    (entries) => {
      try {
        createWebhookTargetPolicy({ allowTargets: entries });
        return true;
      } catch {
        return false;
      }
    },
    { error: "expected IP addresses or CIDRs, comma-separated (e.g. 127.0.0.0/8,::1)" },
  ).optional(),
});
export type WebhookEnv = z.infer<typeof WebhookEnvSchema>;

export type WebhookConfig = {
  /** Sealing keys, the first seals. */
  secretKeys: Uint8Array[];
  /** Non-public targets allowed (empty: none). */
  allowTargets: string[];
};

/** The key file's name under the Tollgate directory. */
export const WEBHOOK_KEY_FILE = "webhook-secret-key";

/** Resolves the webhook settings; creates the key file (0600, directory 0700) when no key is configured. */
export function loadWebhookConfig(env: WebhookEnv, dir: string): WebhookConfig {
  const allowTargets = env.TOLLGATE_WEBHOOK_ALLOW_TARGETS ?? [];
  const configured = (env.TOLLGATE_WEBHOOK_KEYS ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (configured.length > 0) return { secretKeys: configured.map(parseWebhookSecretKey), allowTargets };
  const file = join(dir, WEBHOOK_KEY_FILE);
  if (!existsSync(file)) {
    ensurePrivateDir(dir);
    writePrivateFile(file, `${generateWebhookSecretKey()}\n`);
  }
  tightenPrivateFile(file);
  return { secretKeys: [parseWebhookSecretKey(readFileSync(file, "utf8"))], allowTargets };
}
