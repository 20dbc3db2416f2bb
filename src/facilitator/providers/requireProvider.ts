/**
 * Provider authentication for the facilitator's provider endpoints (`/usage`, `/webhooks`, …):
 * `Authorization: Bearer <apiKey>` with a key issued by `POST /providers`.
 */
import { createHash } from "node:crypto";
import { createMiddleware } from "hono/factory";
import type { Address } from "viem";
import { getAddress } from "viem";
import { z } from "zod";
import { authenticating } from "../../http/routeDocs.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { SafeIntColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { FacilitatorContext } from "../facilitatorContext.ts";

/** The authenticated provider, as `c.get("provider")` holds it. */
export type AuthenticatedProvider = { address: Address; keyId: number };

/** Hono variables set by `requireProvider`: `new Hono<{ Variables: ProviderVariables }>()`. */
export type ProviderVariables = { provider: AuthenticatedProvider };

/** API keys are `tg_` and 32 base64url characters (24 random bytes). */
export const API_KEY_PATTERN = /^tg_[A-Za-z0-9_-]{32}$/;

/** What is stored for a key: its sha256, so a leaked table does not leak keys. */
export function hashApiKey(apiKey: string): Uint8Array {
  return createHash("sha256").update(apiKey, "utf8").digest();
}

const KeyRowSchema = z.object({
  id: SafeIntColumnSchema,
  provider: z.string().regex(/^0x[0-9a-f]{40}$/),
});

/** The provider holding an active key, or `undefined`. */
export async function findProviderByApiKey(
  db: Queryable,
  apiKey: string,
): Promise<AuthenticatedProvider | undefined> {
  if (!API_KEY_PATTERN.test(apiKey)) return undefined;
  const row = await queryOneParsed(
    db,
    KeyRowSchema,
    "SELECT id, provider FROM provider_api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
    [hashApiKey(apiKey)],
  );
  return row === undefined ? undefined : { address: getAddress(row.provider), keyId: row.id };
}

/**
 * Middleware that admits only requests carrying an active provider API key and sets
 * `c.get("provider")`; anything else is a 401 `Unauthorized`.
 *
 * @example
 * app.post("/usage", requireProvider(ctx), (c) => c.json({ provider: c.get("provider").address }));
 */
export function requireProvider(ctx: Pick<FacilitatorContext, "store">) {
  // Marked, so the OpenAPI document lists the provider key on every route this guards (routeDocs.ts).
  return authenticating(
    "providerKey",
    createMiddleware<{ Variables: ProviderVariables }>(async function requireProvider(c, next) {
      const header = c.req.header("authorization") ?? "";
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
      if (match === null) {
        throw new TollgateError("Unauthorized", "send a provider API key as `Authorization: Bearer <key>`");
      }
      const provider = await findProviderByApiKey(ctx.store, match[1] ?? "");
      if (provider === undefined) throw new TollgateError("Unauthorized", "unknown or revoked API key");
      c.set("provider", provider);
      await next();
    }),
  );
}
