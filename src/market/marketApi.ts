/**
 * Request and reply bodies of the market registry's HTTP API, shared by the service (`createMarket`)
 * and its client (`createMarketClient`). Errors are the bodies of docs/protocol.md, "Errors" (`ErrorBodySchema`).
 * Timestamps are integer Unix seconds; amounts are decimal strings of the token's smallest unit.
 */
import type { Address, Hex } from "viem";
import { z } from "zod";
import { AddressSchema, SignatureSchema } from "../protocol/address.ts";
import { AtomicAmountSchema } from "../protocol/amount.ts";
import { canonicalJson } from "../protocol/canonicalJson.ts";
import { TollgateError } from "../protocol/errors.ts";
import { CapabilitySchema, ManifestPricingTypes, type ManifestSigner } from "../protocol/manifest.ts";
import { NetworkSchema } from "../protocol/network.ts";
import { HttpUrlSchema } from "../protocol/paymentRequired.ts";

/** The port `tollgate market` listens on unless told otherwise. */
export const DEFAULT_MARKET_PORT = 4030;
/** Where the CLI looks for a market unless told otherwise. */
export const DEFAULT_MARKET_URL = `http://127.0.0.1:${DEFAULT_MARKET_PORT}`;

const UnixSecondsSchema = z.int().nonnegative().max(Number.MAX_SAFE_INTEGER);

/**
 * What the market's liveness checks know of a seller (docs/market.md, "Liveness"). A seller that is
 * not `reachable` is left out of catalog searches until a check succeeds again. A market that does
 * not check (started without seller access) reports every seller reachable with no `checkedAt`.
 */
export const SellerLivenessSchema = z.object({
  reachable: z.boolean(),
  /** Consecutive failed checks. */
  failures: z.int().nonnegative(),
  checkedAt: UnixSecondsSchema.optional(),
  unreachableSince: UnixSecondsSchema.optional(),
  /** Why the last check failed: `unreachable`, `timeout`, `http_503`, `refused_target`, `wrong_seller`, … */
  lastError: z.string().max(64).optional(),
});
export type SellerLiveness = z.infer<typeof SellerLivenessSchema>;

/** An older market sends no liveness: its sellers count as reachable. */
const LivenessFieldSchema = SellerLivenessSchema.default({ reachable: true, failures: 0 });

/**
 * A stored registration, as `GET /sellers/:address` returns it. `manifest` is exactly what the seller
 * signed (canonical JSON parsed back), so anyone can check `signature` without trusting the market.
 */
export const SellerRecordSchema = z.object({
  address: AddressSchema,
  manifest: z.unknown(),
  signature: SignatureSchema,
  registeredAt: UnixSecondsSchema,
  updatedAt: UnixSecondsSchema,
  liveness: LivenessFieldSchema,
});
export type SellerRecord = z.infer<typeof SellerRecordSchema>;

/** One seller in `GET /sellers`. */
export const SellerSummarySchema = z.object({
  address: AddressSchema,
  name: z.string(),
  description: z.string(),
  baseUrl: HttpUrlSchema,
  network: NetworkSchema,
  capabilities: z.array(z.string()),
  issuedAt: UnixSecondsSchema,
  registeredAt: UnixSecondsSchema,
  updatedAt: UnixSecondsSchema,
  liveness: LivenessFieldSchema,
});
export type SellerSummary = z.infer<typeof SellerSummarySchema>;

export const SellerListSchema = z.object({
  sellers: z.array(SellerSummarySchema),
  limit: z.int().positive(),
  offset: z.int().nonnegative(),
});
export type SellerList = z.infer<typeof SellerListSchema>;

/**
 * What a registration (or refresh) did. Newer `issuedAt` wins: `created` and `updated` stored the
 * manifest, `unchanged` met the same signed manifest again, `superseded` kept a stored registration
 * (or removal) at least as new, and tells which `issuedAt` to beat.
 */
export const RegistrationStatusSchema = z.enum(["created", "updated", "unchanged", "superseded"]);
export type RegistrationStatus = z.infer<typeof RegistrationStatusSchema>;

export const RegistrationResultSchema = z.object({
  status: RegistrationStatusSchema,
  address: AddressSchema,
  /** The `issuedAt` now stored for this seller. */
  issuedAt: UnixSecondsSchema,
});
export type RegistrationResult = z.infer<typeof RegistrationResultSchema>;

/** `POST /sellers/refresh`: fetch the seller's signed manifest from its registered `baseUrl`. */
export const RefreshRequestSchema = z.object({ address: AddressSchema });

/** `POST /sellers/report`: a buyer's calls to this seller fail; the market checks it (rate-limited). */
export const SellerReportSchema = z.object({ address: AddressSchema });

/** The reply to a report: the seller's liveness, and whether the report caused a check. */
export const SellerReportResultSchema = SellerLivenessSchema.extend({
  address: AddressSchema,
  checked: z.boolean(),
});
export type SellerReportResult = z.infer<typeof SellerReportResultSchema>;

/** The message a seller signs (EIP-191) to remove its registration: canonical JSON of these fields. */
export const SellerRemovalClaimsSchema = z.strictObject({
  action: z.literal("tollgate.market.remove"),
  seller: AddressSchema,
  issuedAt: UnixSecondsSchema,
});
export type SellerRemovalClaims = z.infer<typeof SellerRemovalClaimsSchema>;

/** `DELETE /sellers/:address` body. */
export const SellerRemovalSchema = z.object({
  issuedAt: UnixSecondsSchema,
  signature: SignatureSchema,
});
export type SellerRemoval = z.infer<typeof SellerRemovalSchema>;

export const RemovalResultSchema = z.object({
  status: z.enum(["removed", "superseded"]),
  address: AddressSchema,
  issuedAt: UnixSecondsSchema,
});
export type RemovalResult = z.infer<typeof RemovalResultSchema>;

/** The exact EIP-191 message of a removal: its claims' canonical JSON, the address checksummed. */
export function sellerRemovalMessage(seller: Address, issuedAt: number): string {
  const claims: SellerRemovalClaims = {
    action: "tollgate.market.remove",
    seller: AddressSchema.parse(seller),
    issuedAt,
  };
  return canonicalJson(claims);
}

/**
 * Signs the removal of the account's own registration.
 *
 * @example
 * await market.remove(account.address, await signSellerRemoval(account, unixSeconds(clock)));
 */
export async function signSellerRemoval(account: ManifestSigner, issuedAt: number): Promise<SellerRemoval> {
  if (!UnixSecondsSchema.safeParse(issuedAt).success) {
    throw new TollgateError("InvalidRequest", "issuedAt must be whole Unix seconds");
  }
  const signature: Hex = await account.signMessage({
    message: sellerRemovalMessage(account.address, issuedAt),
  });
  return { issuedAt, signature: SignatureSchema.parse(signature) };
}

/** One capability found in the catalog, with what a buyer needs to call it. */
export const CatalogEntrySchema = z.object({
  seller: z.object({ address: AddressSchema, name: z.string() }),
  capability: CapabilitySchema,
  /** Full URL of the capability: the seller's `baseUrl` + the capability's `path`. */
  url: z.string(),
  /** The seller's MCP endpoint, when it lists one: the capability is its tool of the same name. */
  mcp: z.object({ url: z.string(), tool: z.string() }).optional(),
  network: NetworkSchema,
  token: AddressSchema,
  facilitator: HttpUrlSchema,
  /** `cheapestPerCallPrice` of the capability, smallest unit. */
  price: AtomicAmountSchema,
  /** Relevance to `q` (higher is better; 0 without `q`). */
  score: z.number(),
});
export type CatalogEntry = z.infer<typeof CatalogEntrySchema>;

export const CatalogResultSchema = z.object({
  results: z.array(CatalogEntrySchema),
  limit: z.int().positive(),
  offset: z.int().nonnegative(),
});
export type CatalogResult = z.infer<typeof CatalogResultSchema>;

/** The `scheme` filter of `GET /catalog`: a pricing type a capability must offer. */
export const CatalogSchemeSchema = z.enum(ManifestPricingTypes);
