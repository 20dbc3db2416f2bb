/**
 * Provider API keys saved by `tollgate provider register --save`, for `tollgate analytics` and
 * `tollgate webhooks` to use when no key is given (`--api-key`, `TOLLGATE_API_KEY`).
 *
 * `<TOLLGATE_DIR>/provider-keys.json`, 0600 in the 0700 Tollgate directory (src/store/privateFiles.ts):
 * the key is a bearer credential. Keys are filed by the facilitator that issued them and are only ever
 * sent to that facilitator: a command pointed at another one does not get a key it was not issued by.
 * One key per facilitator; saving another replaces it (the replaced key stays active at the
 * facilitator until revoked: `tollgate provider revoke <id>`).
 */
import { existsSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { AddressSchema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { ProviderApiKeyInfoSchema } from "../protocol/subscriptions.ts";
import { ensurePrivateDir, tightenPrivateFile, writePrivateFile } from "../store/privateFiles.ts";

export const PROVIDER_KEYS_FILE = "provider-keys.json";

const SavedProviderKeySchema = z.object({
  provider: AddressSchema,
  apiKey: z.string().regex(/^tg_[A-Za-z0-9_-]{16,128}$/),
  key: ProviderApiKeyInfoSchema,
});
export type SavedProviderKey = z.infer<typeof SavedProviderKeySchema>;

const ProviderKeysFileSchema = z.object({
  version: z.literal(1),
  /** By facilitator base URL (`facilitatorKey`). */
  keys: z.record(z.string(), SavedProviderKeySchema),
});
type ProviderKeysFile = z.infer<typeof ProviderKeysFileSchema>;

/** The facilitator a key belongs to: its base URL without a trailing slash (a path prefix is kept). */
export function facilitatorKey(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`;
}

function readKeysFile(file: string): ProviderKeysFile {
  if (!existsSync(file)) return { version: 1, keys: {} };
  // An older copy may have been left readable (copied around): it holds bearer credentials.
  tightenPrivateFile(file);
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(file, "utf8"));
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `${file} is not JSON: remove it and register again`, { cause });
  }
  const parsed = ProviderKeysFileSchema.safeParse(data);
  if (!parsed.success) {
    throw new TollgateError(
      "InvalidRequest",
      `${file} is not a provider key file: remove it and register again`,
    );
  }
  return parsed.data;
}

/** The key saved for the facilitator at `facilitatorUrl`, if any. */
export function loadProviderKey(dir: string, facilitatorUrl: string): SavedProviderKey | undefined {
  return readKeysFile(join(dir, PROVIDER_KEYS_FILE)).keys[facilitatorKey(facilitatorUrl)];
}

/**
 * Saves `saved` as the key for `facilitatorUrl`, replacing any other; returns the file and the key it
 * replaced. Written whole to a temporary file and renamed, so a crash never leaves half a file.
 */
export function saveProviderKey(
  dir: string,
  facilitatorUrl: string,
  saved: SavedProviderKey,
): { file: string; replaced: SavedProviderKey | undefined } {
  ensurePrivateDir(dir);
  const file = join(dir, PROVIDER_KEYS_FILE);
  const current = readKeysFile(file);
  const name = facilitatorKey(facilitatorUrl);
  const replaced = current.keys[name];
  const next: ProviderKeysFile = { version: 1, keys: { ...current.keys, [name]: saved } };
  const temporary = `${file}.${process.pid}.tmp`;
  writePrivateFile(temporary, `${JSON.stringify(next, null, 2)}\n`);
  renameSync(temporary, file);
  return { file, replaced };
}

/** Forgets the key saved for `facilitatorUrl` when it is the key `keyId` (after a revocation). */
export function forgetProviderKey(dir: string, facilitatorUrl: string, keyId: number): boolean {
  const file = join(dir, PROVIDER_KEYS_FILE);
  const current = readKeysFile(file);
  const name = facilitatorKey(facilitatorUrl);
  if (current.keys[name]?.key.id !== keyId) return false;
  const { [name]: _forgotten, ...rest } = current.keys;
  const temporary = `${file}.${process.pid}.tmp`;
  writePrivateFile(temporary, `${JSON.stringify({ version: 1, keys: rest }, null, 2)}\n`);
  renameSync(temporary, file);
  return true;
}
