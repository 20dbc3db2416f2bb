/**
 * Capability manifests (docs/market.md): what a seller serves at `GET /.well-known/tollgate.json`
 * and registers with a market — its gated capabilities, each with a tool-safe name, input and output
 * JSON Schema and pricing — and the signed registration envelope `{ manifest, signature }`.
 *
 * The signature is EIP-191 (`personal_sign`) by `seller.payTo` over `canonicalJson(manifest)`, so only
 * the holder of the payout key can register or update a seller. It covers the manifest exactly as
 * sent: verifiers hash the value they received, before any parsing, so fields a reader does not know
 * and the letter case of addresses stay covered. `signManifest` signs the parsed (normalized) form,
 * whose canonical text is unchanged by parsing again.
 */
import { type Address, type Hex, recoverMessageAddress } from "viem";
import { z } from "zod";
import { AddressSchema, SignatureSchema, sameAddress } from "./address.ts";
import { canonicalJson } from "./canonicalJson.ts";
import { TollgateError } from "./errors.ts";
import { NetworkSchema } from "./network.ts";
import { parseWire } from "./parseWire.ts";
import { HttpUrlSchema, type PlanTerms } from "./paymentRequired.ts";
import {
  PricingTypes,
  perCallPrice as perCallPriceOf,
  pricingFromWire,
  type WirePricing,
  WirePricingSchema,
} from "./pricing.ts";

/** Where a seller serves its manifest (or its signed envelope), relative to its `baseUrl`. */
export const MANIFEST_PATH = "/.well-known/tollgate.json";

/** Most capabilities one manifest may list. */
export const MAX_CAPABILITIES = 64;

/** Most pricing entries of one capability (one per way to pay, as in a 402's `accepts`). */
export const MAX_PRICING_ENTRIES = 8;

// C0 controls and DEL: a name or description is shown to people and models and stored as text
// (PostgreSQL text cannot hold NUL). Descriptions may still use tab, newline and carriage return.
function hasControl(value: string, allowWhitespace: boolean): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (allowWhitespace && (code === 0x09 || code === 0x0a || code === 0x0d)) continue;
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

function text(max: number, options: { multiline?: boolean } = {}) {
  const allowWhitespace = options.multiline === true;
  return z
    .string()
    .max(max)
    .refine((value) => !hasControl(value, allowWhitespace), { error: "must not contain control characters" });
}

/**
 * A capability name that is also a valid LangChain/OpenAI tool name: 1–64 letters, digits, `_` or `-`.
 * Unique within a manifest.
 */
export const CapabilityNameSchema = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,64}$/, { error: "expected 1-64 letters, digits, `_` or `-` (a tool name)" });

/** The HTTP methods a capability may be served with. */
export const CapabilityMethodSchema = z.enum(["GET", "POST", "PUT", "PATCH", "DELETE"]);
export type CapabilityMethod = z.infer<typeof CapabilityMethodSchema>;

/**
 * An absolute request path below the seller's `baseUrl`: starts with `/`, URL path characters only,
 * no query or fragment (inputs travel in the body, or the query for `GET`).
 */
export const CapabilityPathSchema = z
  .string()
  .max(1024)
  .regex(/^\/[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$/, { error: "expected a path like /v1/forecast" });

/** A JSON Schema document (draft 2020-12 or 7) as a JSON object; its content is the seller's. */
export const JsonSchemaObjectSchema = z.record(z.string(), z.unknown());

/** A tool's input: a JSON Schema of `type: "object"`, as LangChain and OpenAI tools require. */
export const CapabilityInputSchema = JsonSchemaObjectSchema.refine((schema) => schema.type === "object", {
  error: 'an input schema must have type "object"',
  path: ["type"],
});

/** A capability's output: any JSON Schema (an object, or `true` for anything). */
export const CapabilityOutputSchema = z.union([JsonSchemaObjectSchema, z.boolean()]);

/**
 * A capability's pricing entry: the wire form of the one pricing type (`src/protocol/pricing.ts`),
 * `one-time`, `subscription` or `metered`, read with `pricingFromWire`.
 */
export const ManifestPricingSchema = WirePricingSchema;
export type ManifestPricing = WirePricing;
/** The pricing types, also the values of a market's `scheme` filter. */
export const ManifestPricingTypes = PricingTypes;
export type ManifestPricingType = ManifestPricing["type"];

export const CapabilitySchema = z.object({
  name: CapabilityNameSchema,
  /** What the capability does, written for a model choosing tools. */
  description: text(2000, { multiline: true }).min(1),
  method: CapabilityMethodSchema,
  path: CapabilityPathSchema,
  input: CapabilityInputSchema,
  output: CapabilityOutputSchema,
  pricing: z.array(ManifestPricingSchema).min(1).max(MAX_PRICING_ENTRIES),
});
export type Capability = z.infer<typeof CapabilitySchema>;

/** The seller's manifest, as served at `GET /.well-known/tollgate.json` and registered with a market. */
export const ManifestSchema = z
  .object({
    version: z.literal("1"),
    /** The seller's (specialist's) name, for people and catalogs. */
    name: text(100).min(1),
    description: text(2000, { multiline: true }),
    seller: z.object({
      /** The payout address; its key signs registrations. */
      payTo: AddressSchema,
      name: text(100).min(1).optional(),
    }),
    /** Where the capabilities are served: a capability's URL is `baseUrl` + its `path`. */
    baseUrl: HttpUrlSchema,
    /** The facilitator that settles this seller's payments. */
    facilitator: HttpUrlSchema,
    network: NetworkSchema,
    /** The token prices are in (USDC on `network`). */
    token: AddressSchema,
    capabilities: z.array(CapabilitySchema).min(1).max(MAX_CAPABILITIES),
    /**
     * The seller's MCP endpoint (Streamable HTTP), serving each capability as a tool of the same name
     * behind the same prices (docs/mcp.md). Absent: HTTP only.
     */
    mcp: z.object({ url: HttpUrlSchema }).optional(),
    /** When the seller signed this version, Unix seconds; a newer manifest replaces an older one. */
    issuedAt: z.int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  })
  .superRefine((manifest, ctx) => {
    const seen = new Set<string>();
    manifest.capabilities.forEach((capability, index) => {
      if (seen.has(capability.name)) {
        ctx.addIssue({
          code: "custom",
          message: `capability name "${capability.name}" is used twice`,
          path: ["capabilities", index, "name"],
        });
      }
      seen.add(capability.name);
    });
  });
export type Manifest = z.infer<typeof ManifestSchema>;
/** What a seller writes before parsing (addresses in any case). */
export type ManifestInput = z.input<typeof ManifestSchema>;

/**
 * The signed registration envelope. Parsing it normalizes the manifest; to check the signature of an
 * envelope received from someone else, pass the value as received to `verifyManifestSignature`.
 */
export const SignedManifestSchema = z.object({
  manifest: ManifestSchema,
  signature: SignatureSchema,
});
export type SignedManifest = z.infer<typeof SignedManifestSchema>;

/** The narrow signer `signManifest` needs; a viem `LocalAccount` satisfies it. */
export type ManifestSigner = {
  address: Address;
  signMessage(args: { message: string }): Promise<Hex>;
};

/** The exact message the seller signs with EIP-191: the manifest's canonical JSON. */
export function manifestMessage(manifest: unknown): string {
  return canonicalJson(manifest);
}

/**
 * Signs a manifest with the seller's payout key. The manifest is validated and normalized first
 * (addresses checksummed, unknown fields dropped), and that form is what is signed and returned.
 * Throws `InvalidRequest` for a malformed manifest or an account other than `seller.payTo`.
 *
 * @example
 * const envelope = await signManifest(privateKeyToAccount(payoutKey), { ...manifest, issuedAt: unixSeconds(clock) });
 * await market.register(envelope);
 */
export async function signManifest(
  account: ManifestSigner,
  manifest: ManifestInput,
): Promise<SignedManifest> {
  const parsed = parseWire(ManifestSchema, manifest, { what: "manifest" });
  if (!sameAddress(account.address, parsed.seller.payTo)) {
    throw new TollgateError("InvalidRequest", "only the key of seller.payTo can sign the manifest", {
      details: { account: account.address, payTo: parsed.seller.payTo },
    });
  }
  const signature = await account.signMessage({ message: manifestMessage(parsed) });
  return { manifest: parsed, signature: SignatureSchema.parse(signature) };
}

export type ManifestSignatureCheck =
  | { valid: true; seller: Address; manifest: Manifest }
  | {
      valid: false;
      reason: "missing_signature" | "malformed_signature" | "malformed_manifest" | "wrong_signer";
    };

/**
 * Whether `signature` is `seller.payTo`'s EIP-191 signature over the canonical JSON of `manifest`
 * exactly as given. An invalid signature is an expected outcome, so it is data with a `reason`.
 * Recovering a secp256k1 key costs about a millisecond: fine at registration, not for a hot path.
 */
export async function verifyManifestSignature(envelope: {
  manifest: unknown;
  signature?: unknown;
}): Promise<ManifestSignatureCheck> {
  if (envelope.signature === undefined || envelope.signature === null || envelope.signature === "") {
    return { valid: false, reason: "missing_signature" };
  }
  const signature = SignatureSchema.safeParse(envelope.signature);
  if (!signature.success) return { valid: false, reason: "malformed_signature" };
  const manifest = ManifestSchema.safeParse(envelope.manifest);
  if (!manifest.success) return { valid: false, reason: "malformed_manifest" };
  let message: string;
  try {
    message = manifestMessage(envelope.manifest);
  } catch {
    return { valid: false, reason: "malformed_manifest" };
  }
  let signer: Address;
  try {
    signer = await recoverMessageAddress({ message, signature: signature.data });
  } catch {
    // r or s out of range, or a recovery id other than 27/28 (0/1).
    return { valid: false, reason: "malformed_signature" };
  }
  if (!sameAddress(signer, manifest.data.seller.payTo)) return { valid: false, reason: "wrong_signer" };
  return { valid: true, seller: manifest.data.seller.payTo, manifest: manifest.data };
}

/** A capability's full URL: the manifest's `baseUrl` (trailing slashes dropped) followed by its path. */
export function capabilityUrl(
  manifest: Pick<Manifest, "baseUrl">,
  capability: Pick<Capability, "path">,
): string {
  return `${manifest.baseUrl.replace(/\/+$/, "")}${capability.path}`;
}

/** The price of one call under one pricing entry, smallest unit, rounded up (`pricing.ts`'s `perCallPrice`). */
export function perCallPrice(entry: ManifestPricing): bigint {
  return perCallPriceOf(pricingFromWire(entry));
}

/** The lowest `perCallPrice` over a capability's pricing entries: what a catalog's `maxPrice` compares. */
export function cheapestPerCallPrice(capability: Pick<Capability, "pricing">): bigint {
  let best: bigint | undefined;
  for (const entry of capability.pricing) {
    const price = perCallPrice(entry);
    if (best === undefined || price < best) best = price;
  }
  if (best === undefined) throw new TollgateError("InvalidRequest", "a capability needs a pricing entry");
  return best;
}

/**
 * The full plan terms of a `subscription` or `metered` entry (what the agent's policy compares), or
 * `undefined` for a one-time entry or one that does not name its `manager`.
 */
export function planTermsOfPricing(
  manifest: Pick<Manifest, "network" | "token" | "seller">,
  entry: ManifestPricing,
): PlanTerms | undefined {
  if (entry.type === "one-time" || entry.type === "channel" || entry.manager === undefined) return undefined;
  return {
    planId: entry.planId,
    amount: entry.amount,
    interval: entry.interval,
    token: manifest.token,
    includedUnits: entry.includedUnits,
    overageUnitPrice: entry.overageUnitPrice,
    payTo: manifest.seller.payTo,
    network: manifest.network,
    manager: entry.manager,
  };
}

/**
 * What a seller serves at `MANIFEST_PATH`: its signed envelope (preferred: buyers and markets can
 * check it) or the bare manifest. Returns the manifest as received in `raw` (for signature checks)
 * next to its parsed form. Throws `InvalidRequest` for anything else.
 */
export function parseDiscoveryDocument(value: unknown): {
  manifest: Manifest;
  raw: unknown;
  signature: Hex | undefined;
} {
  if (typeof value === "object" && value !== null && "manifest" in value) {
    const envelope = value as { manifest: unknown; signature?: unknown };
    const parsed = parseWire(SignedManifestSchema, value, { what: "signed manifest" });
    return { manifest: parsed.manifest, raw: envelope.manifest, signature: parsed.signature };
  }
  return {
    manifest: parseWire(ManifestSchema, value, { what: "manifest" }),
    raw: value,
    signature: undefined,
  };
}
