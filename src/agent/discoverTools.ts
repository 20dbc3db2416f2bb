/**
 * `discoverTools` (DESIGN.md §7, Discovery): turns a market's catalog, or specialists' published
 * manifests, into paid LangChain tools that spend from one agent's budget.
 */
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { FetchFn } from "../client/facilitatorClient.ts";
import { createMarketClient, type MarketClient, type MarketSearch } from "../market/marketClient.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Capability,
  capabilityUrl,
  MANIFEST_PATH,
  type Manifest,
  parseDiscoveryDocument,
  verifyManifestSignature,
} from "../protocol/manifest.ts";
import { createPayeePins, listingOf, type OfferListing } from "./offerCheck.ts";
import { type PaidToolOptions, paidTool, type RemoteCapability } from "./paidTool.ts";

export type DiscoverToolsOptions = Omit<PaidToolOptions, "fetch" | "forecast"> & {
  fetch?: FetchFn | undefined;
  /** A market to search (URL or client). */
  market?: string | MarketClient | undefined;
  /** What to search the market for (default: everything it lists, up to `limit`). */
  search?: MarketSearch | undefined;
  /** Specialists' base URLs (their manifest is at `/.well-known/tollgate.json`) or manifest URLs. */
  urls?: readonly string[] | undefined;
  /** Calls the planner expects per tool, for the subscribe-versus-pay policy. */
  forecast?: ((toolName: string) => { calls: number; horizonSeconds: number } | undefined) | undefined;
  /** Only tools settled on this network (default: the payer's). */
  network?: string | undefined;
};

export type DiscoveredTool = {
  tool: StructuredToolInterface;
  capability: RemoteCapability;
  seller: string;
  manifestCapability: Capability;
};

/**
 * @example
 * const tools = await discoverTools({ market: "http://127.0.0.1:4030", agent: "researcher", payer, budget });
 */
export async function discoverTools(options: DiscoverToolsOptions): Promise<DiscoveredTool[]> {
  const fetch = options.fetch ?? globalThis.fetch;
  const network = options.network ?? options.payer.network;
  const found: {
    seller: string;
    sellerName: string;
    capability: Capability;
    url: string;
    /** What the seller listed: each 402 is held to it (src/agent/offerCheck.ts). */
    listing: OfferListing;
  }[] = [];

  if (options.market !== undefined) {
    const market =
      typeof options.market === "string"
        ? createMarketClient({ url: options.market, fetch })
        : options.market;
    const result = await market.search({
      limit: 100,
      ...options.search,
      network: network as `eip155:${number}`,
    });
    for (const entry of result.results) {
      found.push({
        seller: entry.seller.address,
        sellerName: entry.seller.name,
        capability: entry.capability,
        url: entry.url,
        // The catalog's seller address is the key that signed the registration, and the payee.
        listing: listingOf(
          { seller: { payTo: entry.seller.address }, network: entry.network, token: entry.token },
          entry.capability.pricing,
          "market",
        ),
      });
    }
  }
  for (const url of options.urls ?? []) {
    const manifest = await fetchManifest(fetch, url);
    if (manifest.network !== network) continue;
    for (const capability of manifest.capabilities) {
      found.push({
        seller: manifest.seller.payTo,
        sellerName: manifest.name,
        capability,
        url: capabilityUrl(manifest, capability),
        listing: listingOf(manifest, capability.pricing, "manifest"),
      });
    }
  }

  // Tool names must be unique for a model; a clash is resolved by prefixing the seller's name.
  const counts = new Map<string, number>();
  for (const f of found) counts.set(f.capability.name, (counts.get(f.capability.name) ?? 0) + 1);
  const seen = new Set<string>();
  const payees = options.payees ?? createPayeePins();
  const tools: DiscoveredTool[] = [];
  for (const f of found) {
    const key = `${f.seller.toLowerCase()}:${f.capability.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const name =
      (counts.get(f.capability.name) ?? 0) > 1
        ? `${f.sellerName.replace(/[^a-zA-Z0-9_-]/g, "_")}_${f.capability.name}`.slice(0, 64)
        : f.capability.name;
    const capability: RemoteCapability = {
      name,
      description: f.capability.description,
      method: f.capability.method,
      url: f.url,
      input: f.capability.input,
    };
    tools.push({
      tool: paidTool(capability, {
        ...options,
        fetch,
        listing: f.listing,
        payees,
        forecast: options.forecast === undefined ? undefined : () => options.forecast?.(name),
      }),
      capability,
      seller: f.seller,
      manifestCapability: f.capability,
    });
  }
  return tools;
}

/** Reads and checks a specialist's manifest: a signed one must be signed by its payout address. */
export async function fetchManifest(fetch: FetchFn, url: string): Promise<Manifest> {
  const target = url.endsWith(".json") ? url : `${url.replace(/\/+$/, "")}${MANIFEST_PATH}`;
  let response: Response;
  try {
    response = await fetch(target, { headers: { accept: "application/json" } });
  } catch (cause) {
    throw new TollgateError("NotFound", `cannot reach ${target}`, { cause });
  }
  if (!response.ok) throw new TollgateError("NotFound", `${target} answered ${response.status}`);
  const document = parseDiscoveryDocument(await response.json());
  if (document.signature !== undefined) {
    const check = await verifyManifestSignature({ manifest: document.raw, signature: document.signature });
    if (!check.valid) {
      throw new TollgateError("InvalidSignature", `the manifest at ${target} is not signed by its seller`, {
        details: { reason: check.reason },
      });
    }
  }
  return document.manifest;
}
