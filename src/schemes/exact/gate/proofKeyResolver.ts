/**
 * Resolves a proof's `kid` to the facilitator's Ed25519 public key from its JWKS.
 *
 * The JWKS is fetched once and cached; an unknown `kid` triggers one refresh (key rotation), but at
 * most once per `minRefreshMs`, so a stream of proofs with made-up kids cannot turn the gate into a
 * JWKS-fetching amplifier. Concurrent lookups share one in-flight fetch.
 *
 * "Unknown key" and "cannot tell" are different outcomes: a proof signed by a key the facilitator does
 * not publish is refused (the payer should not have it), but while the JWKS cannot be fetched a valid
 * proof must not be refused, or the payer would pay again. So when the last fetch failed, `resolve`
 * throws `ChainUnavailable` (the gate answers 503 and keeps the memo unconsumed) instead of answering
 * `undefined`.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Jwks } from "../../../protocol/facilitator.ts";

export type ProofKeyResolver = {
  /** The key of `kid`; `undefined` when the facilitator does not publish it. Throws `ChainUnavailable`. */
  resolve(kid: string): Promise<KeyObject | undefined>;
  /**
   * The key of `kid` when the resolver holds it now, without fetching anything; `undefined` means
   * "ask `resolve`" (not "unknown"). Optional: the gate's hot path verifies without a promise when a
   * resolver offers it.
   */
  known?(kid: string): KeyObject | undefined;
};

export type JwksResolverOptions = {
  loadJwks: () => Promise<Jwks>;
  clock: Clock;
  /** Least time between two refreshes caused by unknown kids (default 30 s). */
  minRefreshMs?: number;
};

/** Seconds a caller is told to wait when the JWKS could not be fetched. */
const UNAVAILABLE_RETRY_AFTER = 5;

export function createJwksResolver(options: JwksResolverOptions): ProofKeyResolver {
  const { loadJwks, clock } = options;
  const minRefreshMs = options.minRefreshMs ?? 30_000;
  let keys = new Map<string, KeyObject>();
  let loadedAt = Number.NEGATIVE_INFINITY;
  let lastFailure: unknown;
  let inFlight: Promise<void> | undefined;

  const refresh = (): Promise<void> => {
    inFlight ??= (async () => {
      try {
        keys = keysOf(await loadJwks());
        lastFailure = undefined;
      } catch (error) {
        // The gate keeps its old keys and retries after the interval.
        lastFailure = error;
      } finally {
        loadedAt = clock.now();
        inFlight = undefined;
      }
    })();
    return inFlight;
  };

  const unavailable = (): TollgateError =>
    new TollgateError("ChainUnavailable", "the facilitator's proof keys cannot be fetched", {
      details: { reason: "jwks_unavailable" },
      cause: lastFailure,
      retryAfter: UNAVAILABLE_RETRY_AFTER,
    });

  return {
    known: (kid) => keys.get(kid),
    async resolve(kid) {
      const known = keys.get(kid);
      if (known !== undefined) return known;
      if (inFlight !== undefined) {
        await inFlight;
      } else if (clock.now() - loadedAt >= minRefreshMs) {
        await refresh();
      }
      const key = keys.get(kid);
      if (key === undefined && lastFailure !== undefined) throw unavailable();
      return key;
    },
  };
}

/** A resolver over fixed keys, for a gate that is configured with the facilitator's JWKS directly. */
export function createStaticKeyResolver(jwks: Jwks): ProofKeyResolver {
  const keys = keysOf(jwks);
  return { resolve: async (kid) => keys.get(kid), known: (kid) => keys.get(kid) };
}

function keysOf(jwks: Jwks): Map<string, KeyObject> {
  const keys = new Map<string, KeyObject>();
  for (const jwk of jwks.keys) {
    if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519") continue;
    keys.set(jwk.kid, createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: jwk.x }, format: "jwk" }));
  }
  return keys;
}
