/**
 * A typed HTTP client for a market registry (`tollgate market`). Every reply is zod-checked; error
 * bodies become `TollgateError`s with the market's code (docs/protocol.md, "Errors"), a reply without one the
 * code of its status, an unreachable market `ChainUnavailable` with `details.reason`
 * `"market_unreachable"` or `"market_timeout"` (worth retrying), and a malformed 2xx reply `Internal`
 * with `"market_bad_reply"`.
 *
 * Manifests read back are checked against their seller's signature, so a buyer does not have to
 * trust the market for what a seller offers, only for finding it.
 */
import type { Address, Hex } from "viem";
import type { z } from "zod";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { parseReply, type ReplyPeer, readReplyText, unansweredError } from "../http/replyErrors.ts";
import { sameAddress } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { type Manifest, type ManifestPricingType, verifyManifestSignature } from "../protocol/manifest.ts";
import type { Network } from "../protocol/network.ts";
import {
  type CatalogResult,
  CatalogResultSchema,
  type RegistrationResult,
  RegistrationResultSchema,
  type RemovalResult,
  RemovalResultSchema,
  type SellerList,
  SellerListSchema,
  type SellerLiveness,
  SellerRecordSchema,
  type SellerRemoval,
  type SellerReportResult,
  SellerReportResultSchema,
} from "./marketApi.ts";

export type MarketClientOptions = {
  /** Base URL of the market, e.g. `http://127.0.0.1:4030` (a path prefix is kept). */
  url: string;
  fetch: FetchFn;
  /** Abort a request after this long (default 15 000 ms). */
  timeoutMs?: number | undefined;
};

export type MarketSearch = {
  q?: string | undefined;
  /** A bigint is the smallest unit; a string is sent as written (`"0.02"`, `"20000"`, `"1usdc"`). */
  maxPrice?: bigint | string | undefined;
  scheme?: ManifestPricingType | undefined;
  network?: Network | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
};

/** A registration read back and checked: the parsed manifest and the envelope exactly as signed. */
export type VerifiedSeller = {
  address: Address;
  manifest: Manifest;
  envelope: { manifest: unknown; signature: Hex };
  registeredAt: number;
  updatedAt: number;
  /** What the market's liveness checks know of the seller. */
  liveness: SellerLiveness;
};

export type MarketClient = {
  readonly url: string;
  /** `POST /sellers`: register or update a signed manifest (see `signManifest`). */
  register(envelope: { manifest: unknown; signature: string }): Promise<RegistrationResult>;
  /** `GET /catalog`: capabilities matching every word of `q`, best first. */
  search(query?: MarketSearch): Promise<CatalogResult>;
  /** `GET /sellers/:address`, signature checked; `undefined` when no such seller is registered. */
  get(address: string): Promise<VerifiedSeller | undefined>;
  /** `GET /sellers`. */
  list(page?: { limit?: number | undefined; offset?: number | undefined }): Promise<SellerList>;
  /** `DELETE /sellers/:address` with a removal from `signSellerRemoval`. */
  remove(address: string, removal: SellerRemoval): Promise<RemovalResult>;
  /** `POST /sellers/refresh`: ask the market to re-read the seller's manifest from its `baseUrl`. */
  refresh(address: string): Promise<RegistrationResult>;
  /**
   * `POST /sellers/report`: tell the market that calls to this seller fail. The market checks the
   * seller itself (at most once per seller every 30 s by default) and stops offering it if it does
   * not answer; a report alone never delists anyone.
   */
  report(address: string): Promise<SellerReportResult>;
};

const MARKET: ReplyPeer = {
  name: "market",
  codeByStatus: {
    400: "InvalidRequest",
    401: "Unauthorized",
    404: "NotFound",
    413: "PayloadTooLarge",
    422: "InvalidSignature",
    429: "RateLimited",
    502: "ChainUnavailable",
    503: "ChainUnavailable",
    504: "ChainUnavailable",
  },
  // A seller record holds one manifest (at most 256 KiB by default).
  maxReplyBytes: 2 * 1024 * 1024,
};

/** Where and how a client reaches its market. */
type MarketConnection = { url: string; timeoutMs: number; fetchFn: FetchFn };

/** The market's base URL without trailing slashes, refused unless http(s). */
function marketUrl(options: MarketClientOptions): string {
  let base: URL;
  try {
    base = new URL(options.url);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `market url is not a URL: ${String(options.url)}`, { cause });
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new TollgateError("InvalidRequest", "market url must be http(s)", {
      details: { url: options.url },
    });
  }
  if (typeof options.fetch !== "function") {
    throw new TollgateError("InvalidRequest", "createMarketClient needs a `fetch` function");
  }
  return base.href.replace(/\/+$/, "");
}

/** One request to the market: its reply checked against `schema`, or the error it stands for. */
async function request<T>(
  market: MarketConnection,
  method: string,
  path: string,
  schema: z.ZodType<T>,
  body?: unknown,
): Promise<T> {
  const target = `${market.url}${path}`;
  const reply = await send(market, target, method, body);
  return parseReply(MARKET, { method, path, url: target }, reply, schema);
}

/** Sends a request and reads its reply (within the size bound); an unreachable market is ChainUnavailable. */
async function send(
  market: MarketConnection,
  target: string,
  method: string,
  body: unknown,
): Promise<{ response: Response; text: string }> {
  const { timeoutMs } = market;
  const timeout = AbortSignal.timeout(timeoutMs);
  const headers: Record<string, string> = { accept: "application/json" };
  const init: RequestInit = { method, headers, signal: timeout };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  try {
    const response = await market.fetchFn(target, init);
    const text = await readReplyText(MARKET, response);
    return { response, text };
  } catch (cause) {
    if (cause instanceof TollgateError) throw cause;
    throw unansweredError(MARKET, { url: target, timedOut: timeout.aborted, timeoutMs, cause });
  }
}

const sellerPath = (address: string) => `/sellers/${encodeURIComponent(address)}`;

/** `?a=1&b=2` of the given values, leaving out undefined ones; "" when none is left. */
function queryString(values: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) if (value !== undefined) params.set(name, value);
  const search = params.toString();
  return search === "" ? "" : `?${search}`;
}

/** `GET /sellers/:address` with the manifest checked against its seller's signature. */
async function getVerifiedSeller(
  market: MarketConnection,
  address: string,
): Promise<VerifiedSeller | undefined> {
  let record: z.infer<typeof SellerRecordSchema>;
  try {
    record = await request(market, "GET", sellerPath(address), SellerRecordSchema);
  } catch (error) {
    if (error instanceof TollgateError && error.code === "NotFound") return undefined;
    throw error;
  }
  const check = await verifyManifestSignature({ manifest: record.manifest, signature: record.signature });
  if (!check.valid || !sameAddress(check.seller, address)) {
    throw new TollgateError("InvalidSignature", "the market returned a manifest its seller did not sign", {
      details: { reason: check.valid ? "wrong_seller" : check.reason, address },
    });
  }
  return {
    address: check.seller,
    manifest: check.manifest,
    envelope: { manifest: record.manifest, signature: record.signature },
    registeredAt: record.registeredAt,
    updatedAt: record.updatedAt,
    liveness: record.liveness,
  };
}

/**
 * A client for one market.
 *
 * @example
 * const market = createMarketClient({ url: "http://127.0.0.1:4030", fetch });
 * await market.register(await signManifest(account, manifest));
 * const { results } = await market.search({ q: "weather", maxPrice: "0.05" });
 */
export function createMarketClient(options: MarketClientOptions): MarketClient {
  const url = marketUrl(options);
  const timeoutMs = options.timeoutMs ?? 15_000;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) {
    throw new TollgateError("InvalidRequest", "market timeoutMs must be a positive integer", {
      details: { timeoutMs },
    });
  }
  // Called bare, as the facilitator client does: a browser's `fetch` refuses another `this`.
  const fetchFn = options.fetch;
  const market: MarketConnection = { url, timeoutMs, fetchFn: (input, init) => fetchFn(input, init) };
  const optional = (value: number | undefined) => (value === undefined ? undefined : String(value));
  return {
    url,
    register: (envelope) => request(market, "POST", "/sellers", RegistrationResultSchema, envelope),
    search(query = {}) {
      const search = queryString({
        q: query.q,
        maxPrice: query.maxPrice?.toString(),
        scheme: query.scheme,
        network: query.network,
        limit: optional(query.limit),
        offset: optional(query.offset),
      });
      return request(market, "GET", `/catalog${search}`, CatalogResultSchema);
    },
    get: (address) => getVerifiedSeller(market, address),
    list(page = {}) {
      const search = queryString({ limit: optional(page.limit), offset: optional(page.offset) });
      return request(market, "GET", `/sellers${search}`, SellerListSchema);
    },
    remove: (address, removal) =>
      request(market, "DELETE", sellerPath(address), RemovalResultSchema, removal),
    refresh: (address) => request(market, "POST", "/sellers/refresh", RegistrationResultSchema, { address }),
    report: (address) => request(market, "POST", "/sellers/report", SellerReportResultSchema, { address }),
  };
}
