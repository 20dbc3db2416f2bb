/**
 * Subscription requests (docs/protocol.md, "Subscription requests"): `X-Tollgate-Sub: <id>` plus `X-Tollgate-Sub-Auth: <token>`,
 * with token = `base64url(json{sub, aud, iat, exp})` + "." + the subscriber's EIP-191 signature over
 * that first part.
 *
 * The signature's text form is 0x-hex of the 65-byte `r ‖ s ‖ v` signature, exactly what viem's
 * `signMessage` returns, and the signed message is the first part's ASCII text itself (viem
 * `signMessage({ message: payload })`, i.e. `personal_sign`). A subscription id alone proves nothing,
 * because ids are public on chain; the signature shows the caller holds the subscriber's key.
 */
import type { Hex } from "viem";
import { z } from "zod";
import { SignatureSchema } from "./address.ts";
import { UintStringSchema } from "./amount.ts";
import { base64UrlDecode, base64UrlEncode, utf8Decode } from "./base64.ts";
import { canonicalJson } from "./canonicalJson.ts";
import { TollgateError } from "./errors.ts";
import { parseWire } from "./parseWire.ts";

/** Longest lifetime (`exp − iat`) of a sub-auth token: one hour. */
export const MAX_SUB_AUTH_LIFETIME = 3600;

/** Longest token accepted: claims with a long origin plus a 132-character signature fit easily. */
export const MAX_SUB_AUTH_TOKEN_LENGTH = 1024;

/** An on-chain subscription id as it travels in `X-Tollgate-Sub`: a canonical decimal uint256. */
export const SubscriptionIdSchema = UintStringSchema;

/**
 * An origin as `new URL(x).origin` prints it: scheme, host and optional port, no path or trailing
 * slash. Gates compare `aud` with their configured public origin in this form, so case matters.
 */
export const OriginSchema = z
  .string()
  .max(255)
  .regex(/^https?:\/\/[^/?#\s@]+$/, { error: "expected an origin like https://api.example.com" })
  .refine(
    (text) => {
      try {
        return new URL(text).origin === text;
      } catch {
        return false;
      }
    },
    { error: "expected an origin in canonical form (lower-case host, no default port)" },
  );

/** Sub-auth claims: subscription id, audience origin, issued-at and expiry in Unix seconds. */
export const SubAuthClaimsSchema = z
  .strictObject({
    sub: SubscriptionIdSchema,
    aud: OriginSchema,
    iat: z.int().nonnegative(),
    exp: z.int().nonnegative(),
  })
  .refine((claims) => claims.exp > claims.iat, { error: "exp must be after iat", path: ["exp"] })
  .refine((claims) => claims.exp - claims.iat <= MAX_SUB_AUTH_LIFETIME, {
    error: `lifetime must be at most ${MAX_SUB_AUTH_LIFETIME} seconds`,
    path: ["exp"],
  });
export type SubAuthClaims = z.infer<typeof SubAuthClaimsSchema>;

/** The token's first part: `base64url(canonicalJson(claims))`. Throws `InvalidRequest` for bad claims. */
export function encodeSubAuthPayload(claims: SubAuthClaims): string {
  return base64UrlEncode(canonicalJson(parseWire(SubAuthClaimsSchema, claims, { what: "sub-auth claims" })));
}

/**
 * The exact message the subscriber signs with EIP-191 (`personal_sign`): the token's first part, as is.
 * Kept as a function so that signer and verifier name the same thing.
 *
 * @example
 * const payload = encodeSubAuthPayload(claims);
 * const token = formatSubAuthToken(payload, await account.signMessage({ message: subAuthMessage(payload) }));
 */
export function subAuthMessage(payload: string): string {
  return payload;
}

/** `payload + "." + signature`. */
export function formatSubAuthToken(payload: string, signature: Hex): string {
  return `${payload}.${signature}`;
}

/**
 * Splits a token into its signed first part, its parsed claims and its signature, without checking
 * the signature or the clock. Throws `SubscriptionAuthInvalid` for anything malformed, which is the
 * code a gate answers with.
 */
export function splitSubAuthToken(token: string): { payload: string; claims: SubAuthClaims; signature: Hex } {
  const refuse = (reason: string, cause?: unknown): never => {
    throw new TollgateError("SubscriptionAuthInvalid", `subscription auth token is malformed: ${reason}`, {
      details: { reason },
      cause,
    });
  };
  if (typeof token !== "string") return refuse("not text");
  if (token.length > MAX_SUB_AUTH_TOKEN_LENGTH) return refuse("too long");
  const parts = token.split(".");
  if (parts.length !== 2) return refuse("expected <payload>.<signature>");
  const [payload = "", signatureText = ""] = parts;
  const signature = SignatureSchema.safeParse(signatureText);
  if (!signature.success) return refuse("signature is not 0x-hex of 65 bytes");
  let json: unknown;
  try {
    json = JSON.parse(utf8Decode(base64UrlDecode(payload)));
  } catch (cause) {
    return refuse("payload is not base64url JSON", cause);
  }
  const claims = SubAuthClaimsSchema.safeParse(json);
  if (!claims.success) return refuse("claims do not match the schema", claims.error);
  return { payload, claims: claims.data, signature: signature.data };
}
