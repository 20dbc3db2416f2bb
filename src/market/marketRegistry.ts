/**
 * The market's registry over the store, free of HTTP: signed seller registrations (newer `issuedAt`
 * wins), signed removals, and catalog search over capability names and descriptions.
 *
 * Invariants:
 * - A stored manifest verified against `seller.payTo` when it was stored; the market never edits it.
 * - A seller's `issued_at` only grows. A removal leaves a tombstone carrying the removal's `issuedAt`,
 *   so a registration signed before the removal cannot be replayed to bring the seller back.
 * - Money is compared exactly: `min_price` is a `uint256` column and ceilings are bound as bigint.
 */
import type { Address, Hex } from "viem";
import { recoverMessageAddress } from "viem";
import { z } from "zod";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { AddressSchema, SignatureSchema, sameAddress } from "../protocol/address.ts";
import { canonicalJson } from "../protocol/canonicalJson.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Capability,
  CapabilitySchema,
  capabilityUrl,
  cheapestPerCallPrice,
  MANIFEST_PATH,
  type Manifest,
  type ManifestPricingType,
  ManifestSchema,
  verifyManifestSignature,
} from "../protocol/manifest.ts";
import { type Network, NetworkSchema } from "../protocol/network.ts";
import { parseWire } from "../protocol/parseWire.ts";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../store/queryParsed.ts";
import type { Queryable, SqlParam, Store } from "../store/store.ts";
import {
  createSellerDocumentFetcher,
  type SellerDocumentFetcher,
  type SellerTargetOptions,
} from "./fetchSellerDocument.ts";
import {
  type CatalogEntry,
  type RegistrationResult,
  type RemovalResult,
  type SellerRecord,
  SellerRemovalSchema,
  type SellerSummary,
  sellerRemovalMessage,
} from "./marketApi.ts";
import { type LivenessColumns, livenessStatusOf, type SellerLivenessStatus } from "./sellerLiveness.ts";

export type MarketRegistryOptions = {
  store: Store;
  clock: Clock;
  /** Oldest signed `issuedAt` accepted by `POST /sellers` and removals, in seconds (default 600). */
  maxAgeSeconds?: number | undefined;
  /** How far ahead of the market's clock `issuedAt` may be, in seconds (default 300). */
  maxFutureSkewSeconds?: number | undefined;
  /** Largest manifest (canonical JSON bytes) stored (default 256 KiB). */
  maxManifestBytes?: number | undefined;
  /**
   * Enables `refresh` and liveness checks: the market fetches `<baseUrl>/.well-known/tollgate.json`
   * with this, after checking the target (see `sellerTargets`). `pinnedSellerFetch` connects to the
   * checked address itself; another `fetch` gets it in `init.target` and may resolve the name again.
   */
  fetch?: FetchFn | undefined;
  /** Which seller addresses the market may fetch (default: public addresses only). */
  sellerTargets?: SellerTargetOptions | undefined;
  /** Shortest time between two refreshes of one seller, in seconds (default 60). */
  refreshIntervalSeconds?: number | undefined;
  /** How long a refresh waits for the seller (default 10 000 ms). */
  refreshTimeoutMs?: number | undefined;
};

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

export type MarketRegistry = {
  /** Stores a signed registration `{ manifest, signature }` received from anyone (untrusted). */
  register(body: unknown): Promise<RegistrationResult>;
  /** Re-reads a registered seller's signed manifest from its `baseUrl`. Needs the `fetch` option. */
  refresh(address: Address): Promise<RegistrationResult>;
  /** Applies a signed removal `{ issuedAt, signature }` of `address`'s registration. */
  remove(address: Address, body: unknown): Promise<RemovalResult>;
  get(address: Address): Promise<SellerRecord | undefined>;
  list(page?: { limit?: number | undefined; offset?: number | undefined }): Promise<SellerSummary[]>;
  search(query: CatalogQuery): Promise<CatalogEntry[]>;
  readonly refreshEnabled: boolean;
};

/** Most words of a query used; the rest are ignored. */
const MAX_QUERY_WORDS = 8;
/** Longest `q` accepted, in characters. */
export const MAX_QUERY_LENGTH = 200;
export const MAX_PAGE_SIZE = 100;
/** Deepest offset served: a catalog is searched, not walked end to end. */
export const MAX_OFFSET = 10_000;

const DEFAULTS = {
  maxAgeSeconds: 600,
  maxFutureSkewSeconds: 300,
  maxManifestBytes: 256 * 1024,
  refreshIntervalSeconds: 60,
  refreshTimeoutMs: 10_000,
};

const SellerRowSchema = z.object({
  address: z.string(),
  issued_at: SafeIntColumnSchema,
  manifest: z.string().nullable(),
  signature: z.string().nullable(),
  base_url: z.string().nullable(),
  registered_at: TimestampColumnSchema,
  updated_at: TimestampColumnSchema,
  refreshed_at: TimestampColumnSchema.nullable(),
  removed_at: TimestampColumnSchema.nullable(),
  check_failures: SafeIntColumnSchema,
  checked_at: TimestampColumnSchema.nullable(),
  unreachable_since: TimestampColumnSchema.nullable(),
  last_check_error: z.string().nullable(),
});
type SellerRow = z.infer<typeof SellerRowSchema>;

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

const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  const result = value ?? fallback;
  if (!Number.isSafeInteger(result) || result < 0) {
    throw new TollgateError("InvalidRequest", `${name} must be a non-negative integer`, {
      details: { [name]: value },
    });
  }
  return result;
}

/**
 * A registry over a migrated store (migration 0040_market).
 *
 * @example
 * const registry = createMarketRegistry({ store, clock: systemClock });
 * await registry.register(await signManifest(account, manifest));
 * const { 0: best } = await registry.search({ q: "weather forecast", maxPrice: 20_000n });
 */
export function createMarketRegistry(options: MarketRegistryOptions): MarketRegistry {
  const { store, clock } = options;
  const maxAge = positiveInt(options.maxAgeSeconds, DEFAULTS.maxAgeSeconds, "maxAgeSeconds");
  const maxSkew = positiveInt(
    options.maxFutureSkewSeconds,
    DEFAULTS.maxFutureSkewSeconds,
    "maxFutureSkewSeconds",
  );
  const maxBytes = positiveInt(options.maxManifestBytes, DEFAULTS.maxManifestBytes, "maxManifestBytes");
  const refreshInterval = positiveInt(
    options.refreshIntervalSeconds,
    DEFAULTS.refreshIntervalSeconds,
    "refreshIntervalSeconds",
  );
  const refreshTimeoutMs = positiveInt(
    options.refreshTimeoutMs,
    DEFAULTS.refreshTimeoutMs,
    "refreshTimeoutMs",
  );
  const fetchFn = options.fetch;
  const fetchDocument: SellerDocumentFetcher | undefined =
    fetchFn === undefined
      ? undefined
      : createSellerDocumentFetcher(fetchFn, options.sellerTargets ?? {}, {
          timeoutMs: refreshTimeoutMs,
          maxBytes,
        });

  /** Refuses an `issuedAt` outside [now − maxAge, now + maxSkew]. */
  function checkFresh(issuedAt: number, what: string): void {
    const now = unixSeconds(clock);
    if (issuedAt > now + maxSkew) {
      throw new TollgateError(
        "InvalidRequest",
        `${what} issuedAt is in the future: check the signer's clock`,
        {
          details: { reason: "issued_in_future", issuedAt, now, maxFutureSkewSeconds: maxSkew },
        },
      );
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
  async function checkEnvelope(body: unknown): Promise<{ manifest: Manifest; text: string; signature: Hex }> {
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
    let text: string;
    try {
      text = canonicalJson(envelope.manifest);
    } catch (cause) {
      throw new TollgateError("InvalidRequest", "manifest has no canonical JSON form", { cause });
    }
    const bytes = Buffer.byteLength(text, "utf8");
    if (bytes > maxBytes) {
      throw new TollgateError("PayloadTooLarge", `manifest is larger than ${maxBytes} bytes`, {
        details: { bytes, maxBytes },
      });
    }
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

  async function selectSeller(db: Queryable, address: string, lock: boolean): Promise<SellerRow | undefined> {
    return queryOneParsed(
      db,
      SellerRowSchema,
      `SELECT address, issued_at, manifest, signature, base_url, registered_at, updated_at, refreshed_at,
              removed_at, check_failures, checked_at, unreachable_since, last_check_error
         FROM market_sellers WHERE address = $1${lock ? " FOR UPDATE" : ""}`,
      [address],
    );
  }

  async function save(manifest: Manifest, text: string, signature: Hex): Promise<RegistrationResult> {
    const address = manifest.seller.payTo.toLowerCase();
    const now = new Date(clock.now());
    const sellerParams: SqlParam[] = [
      address,
      manifest.issuedAt,
      text,
      signature,
      manifest.name,
      manifest.description,
      manifest.baseUrl,
      manifest.facilitator,
      manifest.network,
      manifest.token.toLowerCase(),
      now,
    ];
    return store.transaction(async (tx) => {
      let existing = await selectSeller(tx, address, true);
      if (existing === undefined) {
        const inserted = await tx.query(
          `INSERT INTO market_sellers (address, issued_at, manifest, signature, name, description, base_url,
                                       facilitator, network, token, registered_at, updated_at, next_check_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11)
           ON CONFLICT (address) DO NOTHING RETURNING address`,
          sellerParams,
        );
        if (inserted.length === 1) {
          await writeCapabilities(tx, manifest);
          return { status: "created" as const, address: manifest.seller.payTo, issuedAt: manifest.issuedAt };
        }
        // Another registration of this seller committed first: decide against it like any other.
        existing = await selectSeller(tx, address, true);
        if (existing === undefined) throw new TollgateError("Internal", "seller row vanished under its lock");
      }
      if (manifest.issuedAt <= existing.issued_at) {
        const same = existing.issued_at === manifest.issuedAt && existing.manifest === text;
        return {
          status: same ? ("unchanged" as const) : ("superseded" as const),
          address: manifest.seller.payTo,
          issuedAt: existing.issued_at,
        };
      }
      await tx.query(
        `UPDATE market_sellers
            SET issued_at = $2, manifest = $3, signature = $4, name = $5, description = $6, base_url = $7,
                facilitator = $8, network = $9, token = $10, updated_at = $11, removed_at = NULL,
                registered_at = CASE WHEN removed_at IS NULL THEN registered_at ELSE $11 END,
                -- A newly signed manifest starts liveness afresh, checked on the next sweep.
                next_check_at = $11, check_failures = 0, unreachable_since = NULL, last_check_error = NULL
          WHERE address = $1`,
        sellerParams,
      );
      await writeCapabilities(tx, manifest);
      return {
        status: existing.removed_at === null ? ("updated" as const) : ("created" as const),
        address: manifest.seller.payTo,
        issuedAt: manifest.issuedAt,
      };
    });
  }

  async function writeCapabilities(tx: Queryable, manifest: Manifest): Promise<void> {
    const address = manifest.seller.payTo.toLowerCase();
    await tx.query("DELETE FROM market_capabilities WHERE seller = $1", [address]);
    const sellerText = [manifest.name, manifest.seller.name ?? "", manifest.description].join("\n");
    const params: SqlParam[] = [address, sellerText];
    const rows = manifest.capabilities.map((capability, position) => {
      const base = params.length;
      params.push(
        position,
        capability.name,
        JSON.stringify(capability),
        cheapestPerCallPrice(capability),
        [...new Set(capability.pricing.map((entry) => entry.type))],
        searchableName(capability.name),
        capability.description,
      );
      const p = (i: number) => `$${base + i}`;
      return `($1, ${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}::text[],
        setweight(to_tsvector('english', ${p(6)}), 'A') ||
        setweight(to_tsvector('english', ${p(7)}), 'B') ||
        setweight(to_tsvector('english', $2), 'C'))`;
    });
    await tx.query(
      `INSERT INTO market_capabilities (seller, position, name, capability, min_price, schemes, search_vector)
       VALUES ${rows.join(",\n")}`,
      params,
    );
  }

  async function register(body: unknown): Promise<RegistrationResult> {
    const { manifest, text, signature } = await checkEnvelope(body);
    checkFresh(manifest.issuedAt, "manifest");
    return save(manifest, text, signature);
  }

  async function refresh(address: Address): Promise<RegistrationResult> {
    if (fetchDocument === undefined) {
      throw new TollgateError("NotFound", "this market does not refresh manifests itself");
    }
    const key = address.toLowerCase();
    const now = new Date(clock.now());
    // Claim the refresh first, so concurrent or repeated requests cannot make the market hammer a seller.
    const claimed = await store.transaction(async (tx) => {
      const row = await selectSeller(tx, key, true);
      if (row === undefined || row.removed_at !== null || row.base_url === null) return undefined;
      const last = row.refreshed_at === null ? undefined : seconds(row.refreshed_at);
      const wait = last === undefined ? 0 : last + refreshInterval - seconds(now);
      if (wait > 0) {
        throw new TollgateError(
          "RateLimited",
          `this seller was refreshed less than ${refreshInterval} s ago`,
          {
            retryAfter: wait,
            details: { retryAfter: wait },
          },
        );
      }
      await tx.query("UPDATE market_sellers SET refreshed_at = $2 WHERE address = $1", [key, now]);
      return row.base_url;
    });
    if (claimed === undefined) throw new TollgateError("NotFound", "no seller registered at that address");

    const url = `${claimed.replace(/\/+$/, "")}${MANIFEST_PATH}`;
    const document = await fetchDocument(url);
    const { manifest, text, signature } = await checkEnvelope(document);
    if (!sameAddress(manifest.seller.payTo, address)) {
      throw new TollgateError(
        "InvalidSignature",
        "the manifest at the seller's baseUrl names another seller",
        {
          details: { reason: "wrong_seller", url, payTo: manifest.seller.payTo },
        },
      );
    }
    // No freshness window here: the market fetched this itself, from the address the seller signed.
    const result = await save(manifest, text, signature);
    // The seller answered as itself at its registered URL: that is a successful liveness check too, so
    // `tollgate seller refresh` after a restart puts an unreachable seller back on offer at once.
    await store.query(
      `UPDATE market_sellers
          SET checked_at = $2, check_failures = 0, unreachable_since = NULL, last_check_error = NULL
        WHERE address = $1 AND base_url = $3 AND removed_at IS NULL`,
      [key, new Date(clock.now()), claimed],
    );
    return result;
  }

  async function remove(address: Address, body: unknown): Promise<RemovalResult> {
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
    checkFresh(removal.issuedAt, "removal");
    const key = address.toLowerCase();
    const now = new Date(clock.now());
    return store.transaction(async (tx) => {
      const row = await selectSeller(tx, key, true);
      if (row === undefined || row.removed_at !== null) {
        throw new TollgateError("NotFound", "no seller registered at that address");
      }
      // Ties go to the removal: a seller who registers and removes within one second is removed.
      if (removal.issuedAt < row.issued_at) {
        return { status: "superseded" as const, address, issuedAt: row.issued_at };
      }
      await tx.query("DELETE FROM market_capabilities WHERE seller = $1", [key]);
      await tx.query(
        `UPDATE market_sellers
            SET issued_at = $2, manifest = NULL, signature = NULL, name = NULL, description = NULL,
                base_url = NULL, facilitator = NULL, network = NULL, token = NULL, removed_at = $3,
                updated_at = $3
          WHERE address = $1`,
        [key, removal.issuedAt, now],
      );
      return { status: "removed" as const, address, issuedAt: removal.issuedAt };
    });
  }

  async function get(address: Address): Promise<SellerRecord | undefined> {
    const row = await selectSeller(store, address.toLowerCase(), false);
    if (row === undefined || row.manifest === null || row.signature === null) return undefined;
    return {
      address: AddressSchema.parse(row.address),
      manifest: JSON.parse(row.manifest) as unknown,
      signature: SignatureSchema.parse(row.signature),
      registeredAt: seconds(row.registered_at),
      updatedAt: seconds(row.updated_at),
      liveness: livenessOf(row),
    };
  }

  async function list(page: { limit?: number | undefined; offset?: number | undefined } = {}) {
    const rows = await queryParsed(
      store,
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

  async function search(query: CatalogQuery): Promise<CatalogEntry[]> {
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
      store,
      CatalogRowSchema,
      `SELECT s.address, s.name, s.base_url, s.network, s.token, s.facilitator, c.capability, c.min_price,
              ${score} AS score, s.manifest::json -> 'mcp' ->> 'url' AS mcp_url
         FROM ${from}
        WHERE ${where.join(" AND ")}
        ORDER BY score DESC, c.min_price, s.registered_at, s.address, c.position
        LIMIT ${param(pageSize(query.limit))} OFFSET ${param(pageOffset(query.offset))}`,
      params,
    );
    return rows.map((row) => {
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
    });
  }

  return { register, refresh, remove, get, list, search, refreshEnabled: fetchFn !== undefined };
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

/** `get_weather` and `getWeather` → "get weather": tool names read as words by the text search. */
function searchableName(name: string): string {
  return `${name} ${name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_-]+/g, " ")}`;
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

/** The wire form of a seller's liveness (`GET /sellers`, `GET /sellers/:address`). */
function livenessOf(row: LivenessColumns): Omit<SellerLivenessStatus, "address"> {
  const { address: _address, ...status } = livenessStatusOf(row);
  return status;
}
