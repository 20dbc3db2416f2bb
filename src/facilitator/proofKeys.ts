/**
 * Ed25519 keys that sign payment proofs (docs/protocol.md, "Payment proof"), and the JWKS that publishes them.
 *
 * Ed25519 rather than an EIP-712 signature: a gate verifies a proof on every paid request, and an
 * Ed25519 verify costs a fraction of an ECDSA public-key recovery.
 */
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  type KeyObject,
  randomBytes,
  sign,
} from "node:crypto";
import { base64UrlDecode, base64UrlEncode } from "../protocol/base64.ts";
import { canonicalJson } from "../protocol/canonicalJson.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentProof, UnsignedPaymentProof } from "../protocol/paymentProof.ts";
import { proofSigningInput } from "../protocol/paymentProof.ts";

export type ProofKey = {
  /** RFC 7638 thumbprint of the public key: stable, so a restarted facilitator keeps its `kid`. */
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly publicJwk: { kty: "OKP"; crv: "Ed25519"; x: string; kid: string; alg: "EdDSA"; use: "sig" };
};

// PKCS#8 wrapping of a raw 32-byte Ed25519 seed (RFC 8410): node:crypto imports keys, not seeds.
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** A proof key from its 32-byte seed. */
export function proofKeyFromSeed(seed: Uint8Array): ProofKey {
  if (seed.length !== 32) {
    throw new TollgateError("InvalidRequest", "an Ed25519 proof key seed is 32 bytes", {
      details: { length: seed.length },
    });
  }
  const privateKey = createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]),
    format: "der",
    type: "pkcs8",
  });
  const jwk = createPublicKey(privateKey).export({ format: "jwk" });
  if (typeof jwk.x !== "string") throw new TollgateError("Internal", "Ed25519 public key export had no x");
  const kid = base64UrlEncode(
    createHash("sha256")
      .update(canonicalJson({ crv: "Ed25519", kty: "OKP", x: jwk.x }))
      .digest(),
  );
  return {
    kid,
    privateKey,
    publicJwk: { kty: "OKP", crv: "Ed25519", x: jwk.x, kid, alg: "EdDSA", use: "sig" },
  };
}

/**
 * A proof key from configuration text: the base64url (or 0x-hex) encoding of a 32-byte seed.
 * Refuses anything else with a clear error rather than signing with a key the operator did not mean.
 */
export function parseProofKey(text: string): ProofKey {
  const trimmed = text.trim();
  const seed = /^0x[0-9a-fA-F]{64}$/.test(trimmed)
    ? Buffer.from(trimmed.slice(2), "hex")
    : (() => {
        try {
          return base64UrlDecode(trimmed);
        } catch (cause) {
          throw new TollgateError("InvalidRequest", "proof key must be a base64url or 0x-hex 32-byte seed", {
            cause,
          });
        }
      })();
  return proofKeyFromSeed(seed);
}

/** A fresh random proof key; `seed` is returned so the caller can persist it. */
export function generateProofKey(random: (n: number) => Uint8Array = randomBytes): {
  key: ProofKey;
  seed: string;
} {
  const seed = random(32);
  return { key: proofKeyFromSeed(seed), seed: base64UrlEncode(seed) };
}

/** Signs a proof: `sig` covers the canonical JSON of every other field. */
export function signPaymentProof(key: ProofKey, unsigned: Omit<UnsignedPaymentProof, "kid">): PaymentProof {
  const body: UnsignedPaymentProof = { ...unsigned, kid: key.kid };
  const signature = sign(null, Buffer.from(proofSigningInput(body), "utf8"), key.privateKey);
  return { ...body, sig: base64UrlEncode(signature) };
}

/** The JWKS document served at `/.well-known/jwks.json`: the active key first, retired keys after. */
export function jwksOf(keys: readonly ProofKey[]): { keys: ProofKey["publicJwk"][] } {
  return { keys: keys.map((k) => k.publicJwk) };
}
