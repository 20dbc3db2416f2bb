/**
 * Sub-auth tokens on the payer's side (docs/protocol.md, "Subscription requests"): the subscriber signs
 * `base64url(json{sub, aud, iat, exp})` with EIP-191, and sends it as `X-Tollgate-Sub-Auth` beside
 * `X-Tollgate-Sub`. A subscription id alone proves nothing (ids are public on chain); the token shows
 * the caller holds the subscriber's key, for one gate (`aud`) and at most an hour.
 *
 * Tokens are minted once per (subscription, audience) and reused until shortly before they expire,
 * so a gate — which caches its verification by token — recovers each signature once.
 */
import type { Address, Hex } from "viem";
import { requireObject } from "../../../http/checkInput.ts";
import { type Clock, systemClock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { HeaderName } from "../../../protocol/header.ts";
import {
  encodeSubAuthPayload,
  formatSubAuthToken,
  MAX_SUB_AUTH_LIFETIME,
  OriginSchema,
  SubscriptionIdSchema,
  subAuthMessage,
} from "../../../protocol/subscriptionAuth.ts";

/** What signs tokens: an address and EIP-191 `signMessage` (a viem `LocalAccount` as is). */
export type SubAuthSigner = { address: Address; signMessage(args: { message: string }): Promise<Hex> };

export type SubscriptionAuth = {
  /** A valid token for `subscriptionId` at `audience` (a gate's origin), minted or reused. */
  token(subscriptionId: bigint | string, audience: string): Promise<string>;
  /** `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` for a request to `audience`. */
  headers(subscriptionId: bigint | string, audience: string): Promise<Record<string, string>>;
};

export type SubscriptionAuthOptions = {
  signer: SubAuthSigner;
  clock?: Clock | undefined;
  /** Token lifetime in seconds (default and maximum 3600). */
  lifetimeSeconds?: number | undefined;
  /** A token this close to expiry is replaced (default 300 s). */
  refreshBeforeSeconds?: number | undefined;
};

/** `iat` lies this far back, so a gate whose clock is slightly behind still accepts a fresh token. */
const ISSUED_AT_SKEW_SECONDS = 30;
/** Tokens kept; the oldest is dropped past this (one per subscription and gate origin in practice). */
const MAX_TOKENS = 1_000;

/**
 * @example
 * const auth = createSubscriptionAuth({ signer: account });
 * await fetch(url, { headers: await auth.headers(subscriptionId, new URL(url).origin) });
 */
export function createSubscriptionAuth(options: SubscriptionAuthOptions): SubscriptionAuth {
  requireObject(options, "createSubscriptionAuth({ signer, clock? })");
  const { signer } = options;
  if (typeof signer?.signMessage !== "function") {
    throw new TollgateError(
      "InvalidRequest",
      "sub-auth tokens need an account that can signMessage (EIP-191)",
    );
  }
  const clock = options.clock ?? systemClock;
  const lifetime = options.lifetimeSeconds ?? MAX_SUB_AUTH_LIFETIME;
  const refreshBefore = options.refreshBeforeSeconds ?? 300;
  if (!Number.isSafeInteger(lifetime) || lifetime < 60 || lifetime > MAX_SUB_AUTH_LIFETIME) {
    throw new TollgateError(
      "InvalidRequest",
      `sub-auth lifetimeSeconds must be 60..${MAX_SUB_AUTH_LIFETIME}`,
    );
  }
  if (!Number.isSafeInteger(refreshBefore) || refreshBefore < 0 || refreshBefore >= lifetime) {
    throw new TollgateError("InvalidRequest", "sub-auth refreshBeforeSeconds must be below the lifetime");
  }
  const tokens = new Map<string, Promise<{ token: string; exp: number }>>();

  const mint = async (sub: string, aud: string): Promise<{ token: string; exp: number }> => {
    const iat = Math.max(0, unixSeconds(clock) - ISSUED_AT_SKEW_SECONDS);
    const exp = iat + lifetime;
    const payload = encodeSubAuthPayload({ sub, aud, iat, exp });
    const signature = await signer.signMessage({ message: subAuthMessage(payload) });
    return { token: formatSubAuthToken(payload, signature), exp };
  };

  const token = async (subscriptionId: bigint | string, audience: string): Promise<string> => {
    const sub = SubscriptionIdSchema.safeParse(String(subscriptionId));
    if (!sub.success) {
      throw new TollgateError("InvalidRequest", "a subscription id is a decimal integer", {
        details: { subscriptionId: String(subscriptionId) },
      });
    }
    const aud = OriginSchema.safeParse(audience);
    if (!aud.success) {
      throw new TollgateError(
        "InvalidRequest",
        "the audience is a gate's origin, like https://api.example.com",
        {
          details: { audience },
        },
      );
    }
    const key = `${sub.data} ${aud.data}`;
    const cached = tokens.get(key);
    if (cached !== undefined) {
      try {
        const entry = await cached;
        if (entry.exp - unixSeconds(clock) > refreshBefore) return entry.token;
      } catch {
        // A failed signing is not kept: sign again below.
      }
      if (tokens.get(key) !== cached) return token(subscriptionId, audience);
    }
    const minted = mint(sub.data, aud.data);
    tokens.delete(key);
    if (tokens.size >= MAX_TOKENS) {
      const oldest = tokens.keys().next();
      if (oldest.done !== true) tokens.delete(oldest.value);
    }
    tokens.set(key, minted);
    minted.catch(() => {
      if (tokens.get(key) === minted) tokens.delete(key);
    });
    return (await minted).token;
  };

  return {
    token,
    async headers(subscriptionId, audience) {
      return {
        [HeaderName.Subscription]: String(subscriptionId),
        [HeaderName.SubscriptionAuth]: await token(subscriptionId, audience),
      };
    },
  };
}
