/**
 * Checks sub-auth tokens (DESIGN.md §2.5) for one gate: well-formed, `aud` equal to the gate's public
 * origin, issued for the subscription id the request names, not expired, not issued in the future,
 * and signed (EIP-191) by someone — whose address the caller then compares with the subscription's
 * subscriber.
 *
 * The signature recovery (a secp256k1 public-key recovery, the costly step) runs once per token: the
 * recovered signer, or the refusal, is cached by the token text until the token expires, so a client
 * that reuses its token (as the payer library does) costs one map lookup per request. The cache holds
 * at most `maxEntries` tokens; when full, the oldest entry is dropped (a dropped token is simply
 * recovered again on its next use).
 */
import { type Address, type Hex, recoverMessageAddress } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { splitSubAuthToken, subAuthMessage } from "../../protocol/subscriptionAuth.ts";

/** A checked token: who signed it, or why it is refused (a message for the 402). */
export type SubAuthVerdict = { ok: true; signer: Address } | { ok: false; reason: string };

export type SubAuthVerifier = {
  /** Checks `token` for a request naming `subscriptionId` (canonical decimal). */
  verify(token: string, subscriptionId: string): Promise<SubAuthVerdict>;
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
  signer: Address | undefined;
  /** Why the token itself is refused (malformed, bad signature), independent of the request. */
  refusal: string | undefined;
};

export function createSubAuthVerifier(options: SubAuthVerifierOptions): SubAuthVerifier {
  const { audience, clock } = options;
  const maxEntries = options.maxEntries ?? 10_000;
  const skew = options.clockSkewSeconds ?? 60;
  const recover =
    options.recover ?? ((message: string, signature: Hex) => recoverMessageAddress({ message, signature }));
  // Insertion-ordered: the first key is the oldest entry.
  const entries = new Map<string, Entry>();

  const remember = (token: string, entry: Entry) => {
    if (entries.size >= maxEntries) {
      const oldest = entries.keys().next();
      if (oldest.done !== true) entries.delete(oldest.value);
    }
    entries.set(token, entry);
  };

  const inspect = async (token: string, now: number): Promise<Entry> => {
    let split: ReturnType<typeof splitSubAuthToken>;
    try {
      split = splitSubAuthToken(token);
    } catch (error) {
      const reason = isTollgateError(error) ? error.message : "subscription auth token is malformed";
      // Malformed tokens are not cached: they are cheap to refuse and caching them would let junk evict good tokens.
      return { exp: now + 60, iat: 0, sub: "", aud: "", signer: undefined, refusal: reason };
    }
    const { claims, payload, signature } = split;
    let signer: Address | undefined;
    let refusal: string | undefined;
    try {
      signer = await recover(subAuthMessage(payload), signature);
    } catch {
      refusal = "subscription auth token signature does not recover an address";
    }
    const entry: Entry = {
      exp: claims.exp,
      iat: claims.iat,
      sub: claims.sub,
      aud: claims.aud,
      signer,
      refusal,
    };
    if (claims.exp > now) remember(token, entry);
    return entry;
  };

  return {
    get size() {
      return entries.size;
    },
    async verify(token, subscriptionId) {
      const now = Math.floor(clock.now() / 1000);
      const entry = entries.get(token) ?? (await inspect(token, now));
      if (entry.refusal !== undefined) return { ok: false, reason: entry.refusal };
      if (entry.sub !== subscriptionId) {
        return {
          ok: false,
          reason: `the token was issued for subscription ${entry.sub}, not ${subscriptionId}`,
        };
      }
      if (entry.aud !== audience) {
        return { ok: false, reason: `the token is for ${entry.aud}, not for this API (${audience})` };
      }
      if (entry.exp <= now) {
        entries.delete(token);
        return { ok: false, reason: "the subscription auth token has expired; mint a new one" };
      }
      if (entry.iat > now + skew) {
        return { ok: false, reason: "the subscription auth token is issued in the future; check the clock" };
      }
      if (entry.signer === undefined) return { ok: false, reason: "subscription auth token is not signed" };
      return { ok: true, signer: entry.signer };
    },
  };
}
