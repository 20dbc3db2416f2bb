/**
 * Provider accounts (docs/facilitator.md, "Provider accounts"). A provider is a payout address; it proves control of it by
 * signing a one-time challenge with EIP-191 and receives an API key for the provider endpoints.
 *
 * Decisions (docs/subscriptions.md): registering again issues an additional key and keeps the others,
 * so a key can be rotated without downtime (register, deploy the new key, `DELETE` the old one); at
 * most `maxActiveKeys` keys are active at once.
 *
 * Challenges are stateless (docs/facilitator.md, "Provider accounts"): the nonce carries an HMAC of
 * the address, network, expiry and a random part under a secret of this facilitator, so issuing one
 * stores nothing. Anyone may ask for challenges in any address's name (an address is public), and
 * earlier this filled a short per-address list that evicted the provider's own challenge; now there
 * is nothing to fill. A challenge is recorded only when it is used, by a registration whose signature
 * checked out, which makes it single-use.
 */
import { createHash, createHmac, randomBytes as nodeRandomBytes, timingSafeEqual } from "node:crypto";
import type { Hono } from "hono";
import { type Address, type Hex, verifyMessage } from "viem";
import { z } from "zod";
import { readJsonBody } from "../../http/httpErrors.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import { AddressSchema } from "../../protocol/address.ts";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { TollgateError } from "../../protocol/errors.ts";
import {
  type ProviderAccount,
  ProviderAccountSchema,
  ProviderChallengeRequestSchema,
  type ProviderChallengeResponse,
  ProviderChallengeResponseSchema,
  ProviderRegisterRequestSchema,
  type ProviderRegisterResponse,
  ProviderRegisterResponseSchema,
} from "../../protocol/subscriptions.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { FacilitatorContext } from "../facilitatorContext.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { hashApiKey, requireProvider } from "./requireProvider.ts";

export type ProvidersModuleOptions = {
  /** Random bytes for challenges and keys (default node:crypto). */
  randomBytes?: ((size: number) => Uint8Array) | undefined;
  /** How long a challenge may be used (default 300 s). */
  challengeTtlSeconds?: number | undefined;
  /** Active API keys a provider may hold at once (default 10). */
  maxActiveKeys?: number | undefined;
  /**
   * Key of the challenges' HMAC (at least 32 bytes). Default: one generated on first use and kept in
   * the store (`facilitator_secrets`), so instances sharing a database accept each other's challenges.
   */
  challengeSecret?: Uint8Array | undefined;
};

const SecretRowSchema = z.object({ secret: z.instanceof(Uint8Array) });

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
  if (options.challengeSecret !== undefined && options.challengeSecret.length < 32) {
    throw new TypeError("challengeSecret must be at least 32 bytes");
  }

  return (ctx) => {
    const providers: Providers = {
      ctx,
      random,
      ttl,
      maxActiveKeys,
      secret: challengeSecretOf(ctx.store, options.challengeSecret, random),
    };
    const docs = providerRouteDocs();
    return {
      name: "providers",
      routes(app: Hono) {
        routeChallenge(app, providers, docs);
        routeRegister(app, providers, docs);
        routeAccount(app, providers, docs);
      },
    };
  };
}

/** What the routes of one module instance share: its context, its options with their defaults, its HMAC key. */
type Providers = {
  ctx: FacilitatorContext;
  random: (size: number) => Uint8Array;
  ttl: number;
  maxActiveKeys: number;
  secret: () => Promise<Uint8Array>;
};

type ProviderRouteDocs = ReturnType<typeof providerRouteDocs>;

/** The HMAC key: given, or the store's (created once; concurrent first uses agree on one row). */
function challengeSecretOf(
  store: FacilitatorContext["store"],
  given: Uint8Array | undefined,
  random: (size: number) => Uint8Array,
): () => Promise<Uint8Array> {
  let loaded: Promise<Uint8Array> | undefined;
  return () => {
    if (given !== undefined) return Promise.resolve(given);
    // A failed load is forgotten, so the next request tries again.
    loaded ??= loadChallengeSecret(store, random).catch((error: unknown) => {
      loaded = undefined;
      throw error;
    });
    return loaded;
  };
}

/** The OpenAPI entries of the four routes, made once per module instance. */
function providerRouteDocs() {
  return {
    challenge: routeDoc({
      summary: "A challenge for an address to sign, to register as a provider (sealed, expires)",
      request: ProviderChallengeRequestSchema,
      response: ProviderChallengeResponseSchema,
      errors: [400, 413],
    }),
    register: routeDoc({
      summary: "Register with the address's signature over its challenge and get a provider API key",
      request: ProviderRegisterRequestSchema,
      response: ProviderRegisterResponseSchema,
      status: 201,
      errors: [400, 401, 413],
    }),
    me: routeDoc({
      summary: "The key's provider and its active API keys",
      response: ProviderAccountSchema,
    }),
    revoke: routeDoc({
      summary: "Revoke one of the provider's API keys",
      params: { id: z.string().regex(/^[1-9][0-9]*$/) },
      response: z.object({ revoked: z.int() }),
      errors: [400, 404],
    }),
  };
}

/** `POST /providers/challenge`: a sealed challenge; nothing is stored. */
function routeChallenge(app: Hono, p: Providers, docs: ProviderRouteDocs): void {
  app.post("/providers/challenge", docs.challenge, async (c) => {
    const { address } = await readJsonBody(c, ProviderChallengeRequestSchema);
    const expiresAt = Math.floor(p.ctx.clock.now() / 1000) + p.ttl;
    const nonce = sealNonce(await p.secret(), {
      address,
      network: p.ctx.network,
      expiresAt,
      random: base64UrlEncode(p.random(16)),
    });
    const challenge = providerChallengeText({ address, network: p.ctx.network, nonce, expiresAt });
    const body: ProviderChallengeResponse = { challenge, expiresAt };
    return c.json(body);
  });
}

/** `POST /providers`: a signed challenge buys an API key. */
function routeRegister(app: Hono, p: Providers, docs: ProviderRouteDocs): void {
  app.post("/providers", docs.register, async (c) => {
    const request = await readJsonBody(c, ProviderRegisterRequestSchema);
    const nowMs = p.ctx.clock.now();
    // Cheap checks first: a challenge this facilitator sealed for this address, not expired.
    const opened = openChallenge(await p.secret(), request.challenge, {
      address: request.address,
      network: p.ctx.network,
      now: Math.floor(nowMs / 1000),
      ttl: p.ttl,
    });
    if (opened === undefined) throw challengeRefused();
    // The signature is checked before the challenge is consumed, so a stranger who saw the
    // challenge cannot burn it with a bad signature.
    if (!(await signedBy(p.ctx, request.address, request.challenge, request.signature))) {
      throw new TollgateError("InvalidSignature", "the signature is not the address's over the challenge");
    }
    const apiKey = `tg_${base64UrlEncode(p.random(24))}`;
    const key = await p.ctx.store.transaction((tx) =>
      issueApiKey(tx, {
        owner: request.address.toLowerCase(),
        challenge: request.challenge,
        expiresAt: opened.expiresAt,
        now: new Date(nowMs),
        apiKey,
        maxActiveKeys: p.maxActiveKeys,
      }),
    );
    p.ctx.logger.info({ provider: request.address, keyId: key.id }, "provider API key issued");
    const body: ProviderRegisterResponse = {
      provider: request.address,
      apiKey,
      key: { id: key.id, prefix: key.prefix, createdAt: key.created_at.toISOString() },
    };
    return c.json(body, 201);
  });
}

function challengeRefused(): TollgateError {
  return new TollgateError(
    "Unauthorized",
    "the challenge is unknown, expired or already used; request a new one",
  );
}

/**
 * Consumes the challenge and stores the new key, in one transaction: a refusal (challenge used, too
 * many keys) throws and so leaves the challenge unused.
 */
async function issueApiKey(
  tx: Queryable,
  issue: {
    owner: string;
    challenge: string;
    expiresAt: number;
    now: Date;
    apiKey: string;
    maxActiveKeys: number;
  },
): Promise<z.infer<typeof KeyInfoRowSchema>> {
  const { owner, now, apiKey, maxActiveKeys } = issue;
  // Used challenges are kept until they expire (after which they are refused anyway).
  await tx.query("DELETE FROM provider_challenges WHERE expires_at < $1", [now]);
  const consumed = await tx.query(
    `INSERT INTO provider_challenges (challenge_hash, address, expires_at, used_at)
     VALUES ($1, $2, $3, $4) ON CONFLICT (challenge_hash) DO NOTHING RETURNING address`,
    [sha256(issue.challenge), owner, new Date(issue.expiresAt * 1000), now],
  );
  if (consumed.length === 0) throw challengeRefused();
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
}

/** `GET /providers/me` and `DELETE /providers/keys/:id`: the key holder's own account. */
function routeAccount(app: Hono, p: Providers, docs: ProviderRouteDocs): void {
  const { ctx } = p;
  app.get("/providers/me", docs.me, requireProvider(ctx), async (c) => {
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

  app.delete("/providers/keys/:id", docs.revoke, requireProvider(ctx), async (c) => {
    const provider = c.get("provider");
    const id = z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER).safeParse(c.req.param("id"));
    if (!id.success) throw new TollgateError("InvalidRequest", "key id must be a positive integer");
    const revoked = await ctx.store.query(
      `UPDATE provider_api_keys SET revoked_at = $3
     WHERE id = $1 AND provider = $2 AND revoked_at IS NULL RETURNING id`,
      [id.data, provider.address.toLowerCase(), new Date(ctx.clock.now())],
    );
    if (revoked.length === 0) throw new TollgateError("NotFound", "no active key with that id");
    return c.json({ revoked: id.data });
  });
}

/** The providers module with its defaults (listed in modules.ts). */
export const providersModule: FacilitatorModuleFactory = createProvidersModule();

function sha256(text: string): Uint8Array {
  return createHash("sha256").update(text, "utf8").digest();
}

type SealedFields = { address: Address; network: string; expiresAt: number; random: string };

/** `<random>.<base64url HMAC-SHA256(secret, purpose, address, network, expiry, random)>`. */
function sealNonce(secret: Uint8Array, f: SealedFields): string {
  return `${f.random}.${base64UrlEncode(challengeTag(secret, f))}`;
}

function challengeTag(secret: Uint8Array, f: SealedFields): Uint8Array {
  const input = [
    "tollgate-provider-challenge",
    f.address.toLowerCase(),
    f.network,
    String(f.expiresAt),
    f.random,
  ].join("\n");
  return createHmac("sha256", secret).update(input, "utf8").digest();
}

const CHALLENGE_PATTERN =
  /^Tollgate provider registration\nAddress: (0x[0-9a-fA-F]{40})\nNetwork: (eip155:[0-9]{1,20})\nNonce: ([A-Za-z0-9_-]{1,64})\.([A-Za-z0-9_-]{43})\nExpires: ([0-9T:.Z-]{20,30})$/;

/**
 * The challenge's expiry when it is one this facilitator sealed for `address` on its network, still
 * unexpired and no longer-lived than `ttl`; otherwise `undefined`. The text must be exactly what
 * `providerChallengeText` prints for its fields, so the signed text and the checked fields agree.
 */
function openChallenge(
  secret: Uint8Array,
  challenge: string,
  expect: { address: Address; network: string; now: number; ttl: number },
): { expiresAt: number } | undefined {
  const match = CHALLENGE_PATTERN.exec(challenge);
  if (match === null) return undefined;
  const [, addressText = "", network = "", random = "", tag = "", expires = ""] = match;
  const address = AddressSchema.safeParse(addressText);
  const expiresMs = Date.parse(expires);
  if (!address.success || !Number.isFinite(expiresMs) || expiresMs % 1000 !== 0) return undefined;
  const expiresAt = expiresMs / 1000;
  const fields = { address: address.data, network, expiresAt, random };
  const nonce = `${random}.${tag}`;
  if (providerChallengeText({ ...fields, nonce }) !== challenge) return undefined;
  if (address.data !== expect.address || network !== expect.network) return undefined;
  if (expiresAt <= expect.now || expiresAt > expect.now + expect.ttl) return undefined;
  const expected = challengeTag(secret, fields);
  const given = Buffer.from(tag, "base64url");
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  return { expiresAt };
}

async function loadChallengeSecret(
  store: FacilitatorContext["store"],
  random: (size: number) => Uint8Array,
): Promise<Uint8Array> {
  await store.query(
    `INSERT INTO facilitator_secrets (name, secret) VALUES ('provider_challenge', $1)
     ON CONFLICT (name) DO NOTHING`,
    [random(32)],
  );
  const row = await queryOneParsed(
    store,
    SecretRowSchema,
    "SELECT secret FROM facilitator_secrets WHERE name = 'provider_challenge'",
  );
  if (row === undefined) throw new TollgateError("Internal", "the challenge secret could not be stored");
  return new Uint8Array(row.secret);
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
