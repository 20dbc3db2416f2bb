/**
 * The market's read side: the page of registered sellers and the catalog search over capability names
 * and descriptions. Money is compared exactly: `min_price` is a `uint256` column and ceilings are bound
 * as bigint.
 */
import { z } from "zod";
import { AddressSchema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Capability,
  CapabilitySchema,
  capabilityUrl,
  type ManifestPricingType,
} from "../protocol/manifest.ts";
import { type Network, NetworkSchema } from "../protocol/network.ts";
import { parseWire } from "../protocol/parseWire.ts";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryParsed } from "../store/queryParsed.ts";
import type { Queryable, SqlParam } from "../store/store.ts";
import type { CatalogEntry, SellerSummary } from "./marketApi.ts";
import { livenessOf, seconds } from "./sellerRecords.ts";

export type CatalogQuery = {
  /** Words to find in capability names and descriptions (and the seller's); all must match. */
  q?: string | undefined;
  /** Only capabilities whose cheapest per-call price is at most this, smallest unit. */
  maxPrice?: bigint | undefined;
  /** Only capabilities offering this pricing type. */
  scheme?: ManifestPricingType | undefined;
  network?: Network | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
};

export type CatalogPage = { limit?: number | undefined; offset?: number | undefined };

/** Most words of a query used; the rest are ignored. */
const MAX_QUERY_WORDS = 8;
/** Longest `q` accepted, in characters. */
export const MAX_QUERY_LENGTH = 200;
export const MAX_PAGE_SIZE = 100;
/** Deepest offset served: a catalog is searched, not walked end to end. */
export const MAX_OFFSET = 10_000;

const SummaryRowSchema = z.object({
  address: AddressSchema,
  name: z.string(),
  description: z.string(),
  base_url: z.string(),
  network: NetworkSchema,
  issued_at: SafeIntColumnSchema,
  registered_at: TimestampColumnSchema,
  updated_at: TimestampColumnSchema,
  capabilities: z.array(z.string()).nullable(),
  check_failures: SafeIntColumnSchema,
  checked_at: TimestampColumnSchema.nullable(),
  unreachable_since: TimestampColumnSchema.nullable(),
  last_check_error: z.string().nullable(),
});

const CatalogRowSchema = z.object({
  address: AddressSchema,
  name: z.string(),
  base_url: z.string(),
  network: NetworkSchema,
  token: AddressSchema,
  facilitator: z.string(),
  capability: z.string(),
  min_price: BigintColumnSchema,
  score: z.number(),
  mcp_url: z.string().nullable(),
});
type CatalogRow = z.infer<typeof CatalogRowSchema>;

/** Registered sellers (not removed), oldest registration first. */
export async function listSellers(db: Queryable, page: CatalogPage = {}): Promise<SellerSummary[]> {
  const rows = await queryParsed(
    db,
    SummaryRowSchema,
    `SELECT s.address, s.name, s.description, s.base_url, s.network, s.issued_at, s.registered_at,
            s.updated_at, s.check_failures, s.checked_at,
            s.unreachable_since, s.last_check_error,
            (SELECT array_agg(c.name ORDER BY c.position) FROM market_capabilities c
              WHERE c.seller = s.address) AS capabilities
       FROM market_sellers s
      WHERE s.removed_at IS NULL
      ORDER BY s.registered_at, s.address
      LIMIT $1 OFFSET $2`,
    [pageSize(page.limit), pageOffset(page.offset)],
  );
  return rows.map(
    (row): SellerSummary => ({
      address: row.address,
      name: row.name,
      description: row.description,
      baseUrl: row.base_url,
      network: row.network,
      capabilities: row.capabilities ?? [],
      issuedAt: row.issued_at,
      registeredAt: seconds(row.registered_at),
      updatedAt: seconds(row.updated_at),
      liveness: livenessOf(row),
    }),
  );
}

/** Capabilities matching `query`, best score first, then cheapest. */
export async function searchCatalog(db: Queryable, query: CatalogQuery): Promise<CatalogEntry[]> {
  const q = query.q ?? "";
  if (q.length > MAX_QUERY_LENGTH) {
    throw new TollgateError("InvalidRequest", `q must be at most ${MAX_QUERY_LENGTH} characters`);
  }
  const words = searchWords(q);
  const params: SqlParam[] = [];
  const param = (value: SqlParam) => {
    params.push(value);
    return `$${params.length}`;
  };
  // Sellers whose liveness checks fail are not offered until they answer again (sellerLiveness.ts).
  const where = ["s.removed_at IS NULL", "s.unreachable_since IS NULL"];
  let score = "0::float8";
  let from = "market_capabilities c JOIN market_sellers s ON s.address = c.seller";
  if (words.length > 0) {
    // Words hold letters and digits only, so they are safe inside to_tsquery's syntax. A prefix
    // match (`word:*`, after stemming) finds "forecast" from "fore" and "translation" from "translate".
    from += `, to_tsquery('english', ${param(words.map((word) => `${word}:*`).join(" & "))}) AS search (query)`;
    // A query of stop words only ("the") has no lexemes: it filters nothing.
    where.push("(numnode(search.query) = 0 OR c.search_vector @@ search.query)");
    score = `(CASE WHEN numnode(search.query) = 0 THEN 0 ELSE ts_rank(c.search_vector, search.query) END
              + CASE WHEN lower(c.name) = ${param(q.trim().toLowerCase())} THEN 1 ELSE 0 END)::float8`;
  }
  if (query.maxPrice !== undefined) {
    if (query.maxPrice < 0n) throw new TollgateError("InvalidRequest", "maxPrice must not be negative");
    where.push(`c.min_price <= ${param(query.maxPrice)}::numeric`);
  }
  if (query.scheme !== undefined) where.push(`${param(query.scheme)} = ANY (c.schemes)`);
  if (query.network !== undefined) where.push(`s.network = ${param(query.network)}`);
  const rows = await queryParsed(
    db,
    CatalogRowSchema,
    `SELECT s.address, s.name, s.base_url, s.network, s.token, s.facilitator, c.capability, c.min_price,
            ${score} AS score, s.manifest::json -> 'mcp' ->> 'url' AS mcp_url
       FROM ${from}
      WHERE ${where.join(" AND ")}
      ORDER BY score DESC, c.min_price, s.registered_at, s.address, c.position
      LIMIT ${param(pageSize(query.limit))} OFFSET ${param(pageOffset(query.offset))}`,
    params,
  );
  return rows.map(catalogEntryOf);
}

function catalogEntryOf(row: CatalogRow): CatalogEntry {
  const capability: Capability = parseWire(CapabilitySchema, JSON.parse(row.capability), {
    code: "Internal",
    what: "stored capability",
  });
  return {
    seller: { address: row.address, name: row.name },
    capability,
    url: capabilityUrl({ baseUrl: row.base_url }, capability),
    // From the signed manifest (checked by ManifestSchema at registration).
    ...(row.mcp_url === null ? {} : { mcp: { url: row.mcp_url, tool: capability.name } }),
    network: row.network,
    token: row.token,
    facilitator: row.facilitator,
    price: row.min_price.toString(),
    score: Math.round(row.score * 1e6) / 1e6,
  };
}

function pageSize(limit: number | undefined): number {
  const value = limit ?? 20;
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_PAGE_SIZE) {
    throw new TollgateError("InvalidRequest", `limit must be an integer from 1 to ${MAX_PAGE_SIZE}`);
  }
  return value;
}

function pageOffset(offset: number | undefined): number {
  const value = offset ?? 0;
  if (!Number.isSafeInteger(value) || value < 0 || value > MAX_OFFSET) {
    throw new TollgateError("InvalidRequest", `offset must be an integer from 0 to ${MAX_OFFSET}`);
  }
  return value;
}

/** The distinct lower-case words of a query (letters and digits), camelCase split, at most 8. */
export function searchWords(q: string): string[] {
  const words = q
    .replace(/([\p{Ll}\p{N}])(\p{Lu})/gu, "$1 $2")
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((word) => word.length > 0);
  return [...new Set(words)].slice(0, MAX_QUERY_WORDS);
}
