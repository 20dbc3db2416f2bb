/**
 * The checks of what a seller signs before the market stores or applies it: a registration's envelope
 * (shape, manifest schema, size, EIP-191 signer), a removal's signer, and the freshness window of both.
 * Nothing here touches the store.
 */
import type { Address, Hex } from "viem";
import { recoverMessageAddress } from "viem";
import { SignatureSchema, sameAddress } from "../protocol/address.ts";
import { canonicalJson } from "../protocol/canonicalJson.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { type Manifest, ManifestSchema, verifyManifestSignature } from "../protocol/manifest.ts";
import { parseWire } from "../protocol/parseWire.ts";
import { type SellerRemoval, SellerRemovalSchema, sellerRemovalMessage } from "./marketApi.ts";

/** A registration that passed every check but freshness: what the market stores. */
export type CheckedRegistration = { manifest: Manifest; text: string; signature: Hex };

/** The window a signed `issuedAt` must fall in, in seconds around the market's clock. */
export type FreshnessWindow = { clock: Clock; maxAge: number; maxSkew: number };

/** Refuses an `issuedAt` outside [now − maxAge, now + maxSkew]. */
export function checkFresh(window: FreshnessWindow, issuedAt: number, what: string): void {
  const { clock, maxAge, maxSkew } = window;
  const now = unixSeconds(clock);
  if (issuedAt > now + maxSkew) {
    throw new TollgateError("InvalidRequest", `${what} issuedAt is in the future: check the signer's clock`, {
      details: { reason: "issued_in_future", issuedAt, now, maxFutureSkewSeconds: maxSkew },
    });
  }
  if (now - issuedAt > maxAge) {
    throw new TollgateError(
      "AuthorizationExpired",
      `${what} was signed more than ${maxAge} seconds ago: sign it again with a current issuedAt`,
      { details: { reason: "stale", issuedAt, now, maxAgeSeconds: maxAge } },
    );
  }
}

/**
 * Every check of a signed registration except freshness: shape, manifest schema, signature form,
 * size, and the EIP-191 signer being `seller.payTo`. Returns what to store.
 */
export async function checkEnvelope(body: unknown, maxBytes: number): Promise<CheckedRegistration> {
  if (typeof body !== "object" || body === null || Array.isArray(body) || !("manifest" in body)) {
    throw new TollgateError("InvalidRequest", "expected a signed registration { manifest, signature }", {
      details: { reason: "malformed_envelope" },
    });
  }
  const envelope = body as { manifest: unknown; signature?: unknown };
  if (envelope.signature === undefined || envelope.signature === null || envelope.signature === "") {
    throw new TollgateError(
      "InvalidSignature",
      "registration is not signed: sign canonicalJson(manifest) with seller.payTo's key (EIP-191)",
      { details: { reason: "missing_signature" } },
    );
  }
  const manifest = parseWire(ManifestSchema, envelope.manifest, { what: "manifest" });
  const signature = SignatureSchema.safeParse(envelope.signature);
  if (!signature.success) {
    throw new TollgateError("InvalidSignature", "signature must be 0x-hex of a 65-byte EIP-191 signature", {
      details: { reason: "malformed_signature" },
    });
  }
  const text = canonicalText(envelope.manifest, maxBytes);
  const check = await verifyManifestSignature({ manifest: envelope.manifest, signature: signature.data });
  if (!check.valid) {
    throw new TollgateError(
      "InvalidSignature",
      check.reason === "wrong_signer"
        ? "signature is not seller.payTo's signature over this manifest"
        : "signature does not verify",
      { details: { reason: check.reason, payTo: manifest.seller.payTo } },
    );
  }
  return { manifest, text, signature: signature.data };
}

/** The manifest's canonical JSON, refused when it has none or is larger than `maxBytes`. */
function canonicalText(manifest: unknown, maxBytes: number): string {
  let text: string;
  try {
    text = canonicalJson(manifest);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "manifest has no canonical JSON form", { cause });
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > maxBytes) {
    throw new TollgateError("PayloadTooLarge", `manifest is larger than ${maxBytes} bytes`, {
      details: { bytes, maxBytes },
    });
  }
  return text;
}

/** A removal `{ issuedAt, signature }` of `address`'s registration, signed by `address` (EIP-191). */
export async function checkRemoval(address: Address, body: unknown): Promise<SellerRemoval> {
  if (typeof body === "object" && body !== null && !("signature" in body)) {
    throw new TollgateError(
      "InvalidSignature",
      "removal is not signed: sign the removal message with the seller's payout key",
      { details: { reason: "missing_signature" } },
    );
  }
  const removal = parseWire(SellerRemovalSchema, body, { what: "removal" });
  let signer: Address;
  try {
    signer = await recoverMessageAddress({
      message: sellerRemovalMessage(address, removal.issuedAt),
      signature: removal.signature,
    });
  } catch (cause) {
    throw new TollgateError("InvalidSignature", "removal signature does not verify", {
      details: { reason: "malformed_signature" },
      cause,
    });
  }
  if (!sameAddress(signer, address)) {
    throw new TollgateError("InvalidSignature", "removal is not signed by the seller's payout key", {
      details: { reason: "wrong_signer" },
    });
  }
  return removal;
}
