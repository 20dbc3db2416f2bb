/**
 * Checks sub-auth tokens (docs/protocol.md, "Subscription requests") for one gate: well-formed, `aud` equal to the gate's public
 * origin, issued for the subscription id the request names, not expired, not issued in the future,
 * at most an hour long, and signed (EIP-191) by someone — whose address the caller then compares with
 * the subscription's subscriber.
 *
 * Cost (a stranger must not buy a facilitator lookup per request with self-signed tokens): a request that carries a token costs nothing before the free checks
 * pass. Every claim is checked before the signature recovery (the one costly step), so a token for
 * another gate, another id, an expired one or a malformed one is refused for a base64 decode and a
 * JSON parse. Only recovered signers are cached, by token text until `exp`: a subscriber reusing its
 * token (as the payer library does) costs one map lookup per request. Refusals are never cached, so
 * junk cannot push good tokens out; and the caller `forget`s a token whose subscription check failed
 * (a stranger's self-signed token for a made-up id), so such tokens do not hold cache slots either.
 * The cache holds at most `maxEntries` tokens; past it the oldest entry is dropped (a dropped token
 * is simply recovered again on its next use).
 */
import { type Address, type Hex, recoverMessageAddress } from "viem";
import type { Clock } from "../../../protocol/clock.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import {
  MAX_SUB_AUTH_LIFETIME,
  splitSubAuthToken,
  subAuthMessage,
} from "../../../protocol/subscriptionAuth.ts";

/** A checked token: who signed it, or why it is refused (a message for the 402). */
export type SubAuthVerdict = { ok: true; signer: Address } | { ok: false; reason: string };

export type SubAuthVerifier = {
  /** Checks `token` for a request naming `subscriptionId` (canonical decimal). */
  verify(token: string, subscriptionId: string): Promise<SubAuthVerdict>;
  /**
   * The verdict of `verify` when it needs no recovery: the token is cached and passes every check
   * for this id now. `undefined` otherwise (not cached, or refused: `verify` says why).
   */
  accepted(token: string, subscriptionId: string): (SubAuthVerdict & { ok: true }) | undefined;
  /** Drops a token from the cache: its signer turned out not to hold the subscription it names. */
  forget(token: string): void;
  /**
   * Records that a cached token speaks for `signer`: a smart-contract wallet whose `isValidSignature`
   * accepted it (walletSubAuth.ts), though it recovers to another key. Its later uses pass as cached.
   */
  vouch(token: string, signer: Address): void;
  readonly size: number;
};

export type SubAuthVerifierOptions = {
  /** The gate's public origin: every token's `aud` must equal it exactly. */
  audience: string;
  clock: Clock;
  /** Tokens remembered (default 10 000). */
  maxEntries?: number | undefined;
  /** Seconds a token's `iat` may lie ahead of the gate's clock (default 60). */
  clockSkewSeconds?: number | undefined;
  /** Signature recovery; viem's `recoverMessageAddress` unless replaced (tests count calls). */
  recover?: ((message: string, signature: Hex) => Promise<Address>) | undefined;
};

type Entry = {
  /** Unix seconds after which the token is void and the entry useless. */
  exp: number;
  iat: number;
  sub: string;
  aud: string;
  signer: Address;
  /** The verdict handed out on every use, built once. */
  verdict: SubAuthVerdict & { ok: true };
};

type Claims = Pick<Entry, "exp" | "iat" | "sub" | "aud">;

/** What every token is checked against, fixed for the verifier's life. */
type ClaimRules = { audience: string; skewSeconds: number };

type SplitToken = ReturnType<typeof splitSubAuthToken>;

export function createSubAuthVerifier(options: SubAuthVerifierOptions): SubAuthVerifier {
  const { clock } = options;
  const rules: ClaimRules = { audience: options.audience, skewSeconds: options.clockSkewSeconds ?? 60 };
  const maxEntries = options.maxEntries ?? 10_000;
  const recover =
    options.recover ?? ((message: string, signature: Hex) => recoverMessageAddress({ message, signature }));
  // Insertion-ordered: the first key is the oldest entry.
  const entries = new Map<string, Entry>();

  return {
    get size() {
      return entries.size;
    },
    forget(token) {
      entries.delete(token);
    },
    vouch(token, signer) {
      const entry = entries.get(token);
      if (entry !== undefined) entries.set(token, { ...entry, signer, verdict: { ok: true, signer } });
    },
    accepted(token, subscriptionId) {
      const cached = entries.get(token);
      if (cached === undefined) return undefined;
      return refusalOf(rules, cached, subscriptionId, Math.floor(clock.now() / 1000)) === undefined
        ? cached.verdict
        : undefined;
    },
    async verify(token, subscriptionId) {
      const now = Math.floor(clock.now() / 1000);
      const cached = entries.get(token);
      if (cached !== undefined) {
        const refusal = refusalOf(rules, cached, subscriptionId, now);
        if (refusal === undefined) return cached.verdict;
        if (cached.exp <= now) entries.delete(token);
        return { ok: false, reason: refusal };
      }
      const split = splitAndCheck(rules, token, subscriptionId, now);
      if ("ok" in split) return split;
      const { claims, payload, signature } = split;
      let signer: Address;
      try {
        signer = await recover(subAuthMessage(payload), signature);
      } catch {
        return { ok: false, reason: "subscription auth token signature does not recover an address" };
      }
      const verdict = { ok: true, signer } as const;
      remember(entries, maxEntries, token, {
        exp: claims.exp,
        iat: claims.iat,
        sub: claims.sub,
        aud: claims.aud,
        signer,
        verdict,
      });
      return verdict;
    },
  };
}

/** The free checks: everything but the signature. Returns why the claims are refused, if they are. */
function refusalOf(
  rules: ClaimRules,
  claims: Claims,
  subscriptionId: string,
  now: number,
): string | undefined {
  if (claims.sub !== subscriptionId) {
    return `the token was issued for subscription ${claims.sub}, not ${subscriptionId}`;
  }
  if (claims.aud !== rules.audience) {
    return `the token is for ${claims.aud}, not for this API (${rules.audience})`;
  }
  if (claims.exp <= now) return "the subscription auth token has expired; mint a new one";
  if (claims.iat > now + rules.skewSeconds) {
    return "the subscription auth token is issued in the future; check the clock";
  }
  // The schema also bounds the lifetime; checked here too so a cached entry can never outlive it.
  if (claims.exp - claims.iat > MAX_SUB_AUTH_LIFETIME) {
    return `the token's lifetime is over ${MAX_SUB_AUTH_LIFETIME} seconds`;
  }
  return undefined;
}

/** A token not in the cache, decoded and put through the free checks: its parts, or why it is refused. */
function splitAndCheck(
  rules: ClaimRules,
  token: string,
  subscriptionId: string,
  now: number,
): SplitToken | { ok: false; reason: string } {
  let split: SplitToken;
  try {
    split = splitSubAuthToken(token);
  } catch (error) {
    return {
      ok: false,
      reason: isTollgateError(error) ? error.message : "subscription auth token is malformed",
    };
  }
  const refusal = refusalOf(rules, split.claims, subscriptionId, now);
  return refusal === undefined ? split : { ok: false, reason: refusal };
}

/** Caches a recovered signer, dropping the oldest entry when the cache is full. */
function remember(entries: Map<string, Entry>, maxEntries: number, token: string, entry: Entry): void {
  if (entries.size >= maxEntries) {
    const oldest = entries.keys().next();
    if (oldest.done !== true) entries.delete(oldest.value);
  }
  entries.set(token, entry);
}
