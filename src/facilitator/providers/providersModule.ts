/**
 * Provider accounts (DESIGN.md §4). A provider is a payout address; it proves control of it by
 * signing a one-time challenge with EIP-191 and receives an API key for the provider endpoints.
 *
 * Decisions (docs/subscriptions.md): registering again issues an additional key and keeps the others,
 * so a key can be rotated without downtime (register, deploy the new key, `DELETE` the old one); at
 * most `maxActiveKeys` keys are active at once.
 */
import { createHash, randomBytes as nodeRandomBytes } from "node:crypto";
import type { Hono } from "hono";
import { type Address, type Hex, verifyMessage } from "viem";
import { z } from "zod";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { TollgateError } from "../../protocol/errors.ts";
import {
  type ProviderAccount,
  ProviderChallengeRequestSchema,
  type ProviderChallengeResponse,
  ProviderRegisterRequestSchema,
  type ProviderRegisterResponse,
} from "../../protocol/subscriptions.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { FacilitatorContext, FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { readJsonBody } from "../httpErrors.ts";
import { hashApiKey, requireProvider } from "./requireProvider.ts";

export type ProvidersModuleOptions = {
  /** Random bytes for challenges and keys (default node:crypto). */
  randomBytes?: ((size: number) => Uint8Array) | undefined;
  /** How long a challenge may be used (default 300 s). */
  challengeTtlSeconds?: number | undefined;
  /** Active API keys a provider may hold at once (default 10). */
  maxActiveKeys?: number | undefined;
};

/** Unexpired challenges kept per address; older ones are dropped when a new one is issued. */
const MAX_OPEN_CHALLENGES = 5;

const KeyInfoRowSchema = z.object({
  id: SafeIntColumnSchema,
  prefix: z.string(),
  created_at: TimestampColumnSchema,
});

/** The text a provider signs: says what it is for, so a signature cannot be mistaken for another. */
export function providerChallengeText(p: {
  address: Address;
  network: string;
  nonce: string;
  expiresAt: number;
}): string {
  return [
    "Tollgate provider registration",
    `Address: ${p.address}`,
    `Network: ${p.network}`,
    `Nonce: ${p.nonce}`,
    `Expires: ${new Date(p.expiresAt * 1000).toISOString()}`,
  ].join("\n");
}

/** A factory for the providers module with explicit options. */
export function createProvidersModule(options: ProvidersModuleOptions = {}): FacilitatorModuleFactory {
  const random = options.randomBytes ?? ((size: number) => new Uint8Array(nodeRandomBytes(size)));
  const ttl = options.challengeTtlSeconds ?? 300;
  const maxActiveKeys = options.maxActiveKeys ?? 10;

  return (ctx) => ({
    name: "providers",
    routes(app: Hono) {
      app.post("/providers/challenge", async (c) => {
        const { address } = await readJsonBody(c, ProviderChallengeRequestSchema);
        const nowMs = ctx.clock.now();
        const expiresAt = Math.floor(nowMs / 1000) + ttl;
        const challenge = providerChallengeText({
          address,
          network: ctx.network,
          nonce: base64UrlEncode(random(32)),
          expiresAt,
        });
        const owner = address.toLowerCase();
        await ctx.store.transaction(async (tx) => {
          await tx.query("DELETE FROM provider_challenges WHERE expires_at < $1", [new Date(nowMs)]);
          await tx.query(
            `DELETE FROM provider_challenges WHERE address = $1 AND challenge_hash IN (
               SELECT challenge_hash FROM provider_challenges WHERE address = $1
               ORDER BY created_at DESC, challenge_hash OFFSET $2)`,
            [owner, MAX_OPEN_CHALLENGES - 1],
          );
          await tx.query(
            "INSERT INTO provider_challenges (challenge_hash, address, expires_at) VALUES ($1, $2, $3)",
            [sha256(challenge), owner, new Date(expiresAt * 1000)],
          );
        });
        const body: ProviderChallengeResponse = { challenge, expiresAt };
        return c.json(body);
      });

      app.post("/providers", async (c) => {
        const request = await readJsonBody(c, ProviderRegisterRequestSchema);
        // The signature is checked before the challenge is consumed, so a stranger who saw the
        // challenge cannot burn it with a bad signature.
        if (!(await signedBy(ctx, request.address, request.challenge, request.signature))) {
          throw new TollgateError(
            "InvalidSignature",
            "the signature is not the address's over the challenge",
          );
        }
        const owner = request.address.toLowerCase();
        const apiKey = `tg_${base64UrlEncode(random(24))}`;
        const now = new Date(ctx.clock.now());
        const key = await ctx.store.transaction(async (tx) => {
          const consumed = await tx.query(
            `UPDATE provider_challenges SET used_at = $3
             WHERE challenge_hash = $1 AND address = $2 AND used_at IS NULL AND expires_at > $3
             RETURNING address`,
            [sha256(request.challenge), owner, now],
          );
          if (consumed.length === 0) {
            throw new TollgateError(
              "Unauthorized",
              "the challenge is unknown, expired or already used; request a new one",
            );
          }
          // The upsert locks the provider's row until commit: concurrent registrations of one
          // provider take turns, so the key limit below holds.
          await tx.query(
            `INSERT INTO providers (address) VALUES ($1)
             ON CONFLICT (address) DO UPDATE SET updated_at = now()`,
            [owner],
          );
          const active = await tx.query(
            "SELECT id FROM provider_api_keys WHERE provider = $1 AND revoked_at IS NULL",
            [owner],
          );
          if (active.length >= maxActiveKeys) {
            throw new TollgateError(
              "InvalidRequest",
              `a provider may hold ${maxActiveKeys} active API keys; revoke one first (DELETE /providers/keys/:id)`,
              { details: { reason: "too_many_keys", maxActiveKeys } },
            );
          }
          const row = await queryOneParsed(
            tx,
            KeyInfoRowSchema,
            `INSERT INTO provider_api_keys (provider, key_hash, prefix) VALUES ($1, $2, $3)
             RETURNING id, prefix, created_at`,
            [owner, hashApiKey(apiKey), apiKey.slice(0, 8)],
          );
          if (row === undefined) throw new TollgateError("Internal", "API key insert returned nothing");
          return row;
        });
        ctx.logger.info({ provider: request.address, keyId: key.id }, "provider API key issued");
        const body: ProviderRegisterResponse = {
          provider: request.address,
          apiKey,
          key: { id: key.id, prefix: key.prefix, createdAt: key.created_at.toISOString() },
        };
        return c.json(body, 201);
      });

      app.get("/providers/me", requireProvider(ctx), async (c) => {
        const provider = c.get("provider");
        const keys = await queryParsed(
          ctx.store,
          KeyInfoRowSchema,
          `SELECT id, prefix, created_at FROM provider_api_keys
           WHERE provider = $1 AND revoked_at IS NULL ORDER BY id`,
          [provider.address.toLowerCase()],
        );
        const body: ProviderAccount = {
          provider: provider.address,
          keys: keys.map((k) => ({ id: k.id, prefix: k.prefix, createdAt: k.created_at.toISOString() })),
        };
        return c.json(body);
      });

      app.delete("/providers/keys/:id", requireProvider(ctx), async (c) => {
        const provider = c.get("provider");
        const id = z.coerce
          .number()
          .int()
          .positive()
          .max(Number.MAX_SAFE_INTEGER)
          .safeParse(c.req.param("id"));
        if (!id.success) throw new TollgateError("InvalidRequest", "key id must be a positive integer");
        const revoked = await ctx.store.query(
          `UPDATE provider_api_keys SET revoked_at = $3
           WHERE id = $1 AND provider = $2 AND revoked_at IS NULL RETURNING id`,
          [id.data, provider.address.toLowerCase(), new Date(ctx.clock.now())],
        );
        if (revoked.length === 0) throw new TollgateError("NotFound", "no active key with that id");
        return c.json({ revoked: id.data });
      });
    },
  });
}

/** The providers module with its defaults (listed in modules.ts). */
export const providersModule: FacilitatorModuleFactory = createProvidersModule();

function sha256(text: string): Uint8Array {
  return createHash("sha256").update(text, "utf8").digest();
}

/**
 * EOA signatures are recovered locally; an address with code (a contract wallet) is asked on chain
 * (ERC-1271, through viem's `verifyMessage`).
 */
async function signedBy(
  ctx: Pick<FacilitatorContext, "publicClient">,
  address: Address,
  message: string,
  signature: Hex,
): Promise<boolean> {
  if (signature.length === 132) {
    const ok = await verifyMessage({ address, message, signature }).catch(() => false);
    if (ok) return true;
  }
  const code = await ctx.publicClient.getCode({ address }).catch(() => undefined);
  if (code === undefined || code === "0x") return false;
  return ctx.publicClient.verifyMessage({ address, message, signature }).catch(() => false);
}
