/**
 * The market's registry over the store, free of HTTP: signed seller registrations (newer `issuedAt`
 * wins), signed removals, and catalog search over capability names and descriptions.
 *
 * Invariants:
 * - A stored manifest verified against `seller.payTo` when it was stored; the market never edits it.
 * - A seller's `issued_at` only grows. A removal leaves a tombstone carrying the removal's `issuedAt`,
 *   so a registration signed before the removal cannot be replayed to bring the seller back.
 * - Money is compared exactly: `min_price` is a `uint256` column and ceilings are bound as bigint.
 *
 * Its parts: the checks of what a seller signs (registrationChecks.ts), the seller rows
 * (sellerRecords.ts) and the catalog reads (catalogQueries.ts).
 */
import type { Address } from "viem";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { sameAddress } from "../protocol/address.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { MANIFEST_PATH } from "../protocol/manifest.ts";
import type { Store } from "../store/store.ts";
import { type CatalogPage, type CatalogQuery, listSellers, searchCatalog } from "./catalogQueries.ts";
import {
  createSellerDocumentFetcher,
  type SellerDocumentFetcher,
  type SellerTargetOptions,
} from "./fetchSellerDocument.ts";
import type {
  CatalogEntry,
  RegistrationResult,
  RemovalResult,
  SellerRecord,
  SellerSummary,
} from "./marketApi.ts";
import { checkEnvelope, checkFresh, checkRemoval, type FreshnessWindow } from "./registrationChecks.ts";
import { claimRefresh, readSeller, recordAnswered, removeSeller, saveRegistration } from "./sellerRecords.ts";

export {
  type CatalogQuery,
  MAX_OFFSET,
  MAX_PAGE_SIZE,
  MAX_QUERY_LENGTH,
  searchWords,
} from "./catalogQueries.ts";

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

const DEFAULTS = {
  maxAgeSeconds: 600,
  maxFutureSkewSeconds: 300,
  maxManifestBytes: 256 * 1024,
  refreshIntervalSeconds: 60,
  refreshTimeoutMs: 10_000,
};

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  const result = value ?? fallback;
  if (!Number.isSafeInteger(result) || result < 0) {
    throw new TollgateError("InvalidRequest", `${name} must be a non-negative integer`, {
      details: { [name]: value },
    });
  }
  return result;
}

/** The registry's limits, checked once from its options. */
type RegistrySettings = {
  store: Store;
  clock: Clock;
  freshness: FreshnessWindow;
  maxBytes: number;
  refreshInterval: number;
  fetchDocument: SellerDocumentFetcher | undefined;
};

function registrySettings(options: MarketRegistryOptions): RegistrySettings {
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
  return { store, clock, freshness: { clock, maxAge, maxSkew }, maxBytes, refreshInterval, fetchDocument };
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
  const settings = registrySettings(options);
  const { store, clock } = settings;
  return {
    async register(body: unknown): Promise<RegistrationResult> {
      const { manifest, text, signature } = await checkEnvelope(body, settings.maxBytes);
      checkFresh(settings.freshness, manifest.issuedAt, "manifest");
      return saveRegistration(store, clock, manifest, text, signature);
    },
    refresh: (address) => refreshSeller(settings, address),
    async remove(address: Address, body: unknown): Promise<RemovalResult> {
      const removal = await checkRemoval(address, body);
      checkFresh(settings.freshness, removal.issuedAt, "removal");
      return removeSeller(store, address, removal, new Date(clock.now()));
    },
    get: (address: Address): Promise<SellerRecord | undefined> => readSeller(store, address),
    list: (page?: CatalogPage): Promise<SellerSummary[]> => listSellers(store, page),
    search: (query: CatalogQuery): Promise<CatalogEntry[]> => searchCatalog(store, query),
    refreshEnabled: options.fetch !== undefined,
  };
}

/** Re-reads a registered seller's signed manifest from its `baseUrl` (`MarketRegistry.refresh`). */
async function refreshSeller(settings: RegistrySettings, address: Address): Promise<RegistrationResult> {
  const { store, clock, fetchDocument } = settings;
  if (fetchDocument === undefined) {
    throw new TollgateError("NotFound", "this market does not refresh manifests itself");
  }
  const key = address.toLowerCase();
  // Claim the refresh first, so concurrent or repeated requests cannot make the market hammer a seller.
  const claimed = await claimRefresh(store, key, new Date(clock.now()), settings.refreshInterval);
  if (claimed === undefined) throw new TollgateError("NotFound", "no seller registered at that address");

  const url = `${claimed.replace(/\/+$/, "")}${MANIFEST_PATH}`;
  const document = await fetchDocument(url);
  const { manifest, text, signature } = await checkEnvelope(document, settings.maxBytes);
  if (!sameAddress(manifest.seller.payTo, address)) {
    throw new TollgateError("InvalidSignature", "the manifest at the seller's baseUrl names another seller", {
      details: { reason: "wrong_seller", url, payTo: manifest.seller.payTo },
    });
  }
  // No freshness window here: the market fetched this itself, from the address the seller signed.
  const result = await saveRegistration(store, clock, manifest, text, signature);
  // The seller answered as itself at its registered URL: that is a successful liveness check too, so
  // `tollgate seller refresh` after a restart puts an unreachable seller back on offer at once.
  await recordAnswered(store, key, new Date(clock.now()), claimed);
  return result;
}
