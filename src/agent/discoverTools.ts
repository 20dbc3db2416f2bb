/**
 * `discoverTools` (docs/market.md): turns a market's catalog, specialists' published
 * manifests, and remote tool manifests (`tools/*.json`, see docs/agents.md "Tool manifests") into paid
 * LangChain tools that spend from one agent's budget.
 *
 * A paid call that finds its seller down (`SellerUnreachable`) is reported to the market the seller
 * was found in, which then checks the seller itself and stops offering it if it is gone
 * (docs/market.md, "Liveness"). A report never delists anyone by itself.
 */
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { Logger } from "pino";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { createMarketClient, type MarketClient, type MarketSearch } from "../market/marketClient.ts";
import { sameAddress } from "../protocol/address.ts";
import { formatUnitsExact, parseUnitsExact } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Capability,
  capabilityUrl,
  cheapestPerCallPrice,
  MANIFEST_PATH,
  type Manifest,
  parseDiscoveryDocument,
  verifyManifestSignature,
} from "../protocol/manifest.ts";
import { createMcpConnections, type McpConnections, type McpServerRef } from "./mcp/mcpConnections.ts";
import { lazyMcpFetch, mcpServerTools, mcpToolUrl } from "./mcp/mcpToolSource.ts";
import { createPayeePins, listingOf, type OfferListing } from "./offerCheck.ts";
import { type PaidToolOptions, paidTool, type RemoteCapability } from "./paidTool.ts";
import { sellerUnreachableError } from "./sellerUnreachable.ts";
import type { SpendEvent } from "./spendReport.ts";
import { type LoadedTool, listToolManifests } from "./tools/loadTool.ts";
import type { RemoteToolManifest } from "./tools/toolManifest.ts";

export type DiscoverToolsOptions = Omit<PaidToolOptions, "fetch" | "forecast"> & {
  fetch?: FetchFn | undefined;
  /** A market to search (URL or client). */
  market?: string | MarketClient | undefined;
  /** What to search the market for (default: everything it lists, up to `limit`). */
  search?: MarketSearch | undefined;
  /** Specialists' base URLs (their manifest is at `/.well-known/tollgate.json`) or manifest URLs. */
  urls?: readonly string[] | undefined;
  /**
   * Remote tool manifests, as `loadTool` returns them (`{ kind: "remote", manifest }`) or bare; each
   * becomes one paid tool with the manifest's name. Local tools in the list are refused: they need no
   * payment, use `loaded.tool` directly.
   */
  tools?: readonly (LoadedTool | RemoteToolManifest)[] | undefined;
  /** A tools directory: every remote manifest in it is discovered as with `tools` (local ones are skipped). */
  toolsDir?: string | undefined;
  /** Calls the planner expects per tool, for the subscribe-versus-pay policy. */
  forecast?: ((toolName: string) => { calls: number; horizonSeconds: number } | undefined) | undefined;
  /**
   * MCP servers whose tools are bought over MCP (docs/mcp.md): Streamable HTTP URLs or stdio commands
   * (`{ command, args }`). Their tools have no signed listing: the first payee each names is pinned.
   */
  mcpServers?: readonly McpServerRef[] | undefined;
  /** The MCP clients to use (default: new ones); close them when the agent is done. */
  mcpConnections?: McpConnections | undefined;
  /**
   * How to call sellers found in the market or by manifest that list an MCP endpoint too: `"mcp"`
   * buys over MCP (the same prices, payments and listing), `"http"` (default) over their HTTP routes.
   */
  transport?: "http" | "mcp" | undefined;
  /** Only tools settled on this network (default: the payer's). */
  network?: string | undefined;
  logger?: Pick<Logger, "info" | "warn"> | undefined;
};

export type DiscoveredTool = {
  tool: StructuredToolInterface;
  capability: RemoteCapability;
  seller: string;
  manifestCapability: Capability;
};

/** One capability found, before it becomes a tool. */
type Found = {
  seller: string;
  sellerName: string;
  capability: Capability;
  url: string;
  /** The market it was found in, to report it to when it does not answer. */
  market?: MarketClient | undefined;
  /** What the seller listed: each 402 is held to it (src/agent/offerCheck.ts); none for a bare MCP tool. */
  listing: OfferListing | undefined;
  /** Set for a tool bought over MCP: the `fetch` that calls it. */
  fetch?: FetchFn | undefined;
  /** Set by a tool manifest: the tool's own name (never prefixed), description and price ceiling. */
  name?: string | undefined;
  description?: string | undefined;
  maxPrice?: bigint | undefined;
};

/** What the discovery's steps share: the options and what was chosen from them once. */
type Discovery = {
  options: DiscoverToolsOptions;
  fetch: FetchFn;
  network: string;
  mcp: McpConnections;
  /** The market client for a URL, one per URL. */
  marketAt: (market: string | MarketClient) => MarketClient;
};

function discoveryOf(options: DiscoverToolsOptions): Discovery {
  const fetch = options.fetch ?? globalThis.fetch;
  const network = options.network ?? options.payer.network;
  const mcp = options.mcpConnections ?? createMcpConnections({ fetch });
  const markets = new Map<string, MarketClient>();
  const marketAt = (market: string | MarketClient): MarketClient => {
    if (typeof market !== "string") return market;
    let client = markets.get(market);
    if (client === undefined) {
      client = createMarketClient({ url: market, fetch });
      markets.set(market, client);
    }
    return client;
  };
  return { options, fetch, network, mcp, marketAt };
}

/** A seller's capability over MCP when asked for and listed, else unchanged (HTTP). */
function overMcp(discovery: Discovery, entry: Found, mcpUrl: string | undefined): Found {
  return discovery.options.transport !== "mcp" || mcpUrl === undefined
    ? entry
    : {
        ...entry,
        capability: { ...entry.capability, method: "POST" },
        url: mcpToolUrl(mcpUrl, entry.capability.name),
        fetch: lazyMcpFetch(discovery.mcp, mcpUrl, entry.capability.name),
      };
}

/** The capabilities the market's search finds on the network. */
async function foundInMarket(discovery: Discovery): Promise<Found[]> {
  const { options } = discovery;
  if (options.market === undefined) return [];
  const market = discovery.marketAt(options.market);
  const result = await market.search({
    limit: 100,
    ...options.search,
    network: discovery.network as `eip155:${number}`,
  });
  return result.results.map((entry) =>
    overMcp(
      discovery,
      {
        seller: entry.seller.address,
        sellerName: entry.seller.name,
        capability: entry.capability,
        url: entry.url,
        market,
        // The catalog's seller address is the key that signed the registration, and the payee.
        listing: listingOf(
          { seller: { payTo: entry.seller.address }, network: entry.network, token: entry.token },
          entry.capability.pricing,
          "market",
        ),
      },
      entry.mcp?.url,
    ),
  );
}

/** The capabilities of the sellers' manifests at `options.urls` that settle on the network, read in turn. */
async function foundByManifest(discovery: Discovery): Promise<Found[]> {
  const found: Found[] = [];
  for (const url of discovery.options.urls ?? []) {
    const manifest = await fetchManifest(discovery.fetch, url);
    if (manifest.network !== discovery.network) continue;
    for (const capability of manifest.capabilities) {
      found.push(
        overMcp(
          discovery,
          {
            seller: manifest.seller.payTo,
            sellerName: manifest.name,
            capability,
            url: capabilityUrl(manifest, capability),
            listing: listingOf(manifest, capability.pricing, "manifest"),
          },
          manifest.mcp?.url,
        ),
      );
    }
  }
  return found;
}

/** The bare MCP servers' tools (no listing to hold their 402s to). */
async function foundOnMcpServers(discovery: Discovery): Promise<Found[]> {
  const tools = await mcpServerTools(discovery.options.mcpServers ?? [], discovery.mcp);
  return tools.map((tool) => ({
    seller: tool.serverUrl,
    sellerName: tool.serverName,
    capability: tool.capability,
    url: tool.url,
    listing: undefined,
    fetch: tool.fetch,
  }));
}

/** The remote tool manifests given (a local one is refused) and those in `toolsDir`. */
async function remoteToolManifests(options: DiscoverToolsOptions): Promise<RemoteToolManifest[]> {
  const manifests: RemoteToolManifest[] = [];
  for (const entry of options.tools ?? []) {
    if ("kind" in entry && entry.kind === "local" && "tool" in entry) {
      throw new TollgateError(
        "InvalidRequest",
        `tool ${entry.manifest.name} is local: use loaded.tool directly, discoverTools buys remote tools`,
      );
    }
    manifests.push("manifest" in entry ? (entry.manifest as RemoteToolManifest) : entry);
  }
  if (options.toolsDir !== undefined) {
    for (const manifest of await listToolManifests({ dir: options.toolsDir })) {
      if (manifest.kind === "remote") manifests.push(manifest);
    }
  }
  return manifests;
}

/**
 * Each capability found once (by seller, capability and tool name) as a paid tool. Tool names must be
 * unique for a model; a clash is resolved by prefixing the seller's name. A tool manifest's name is the
 * user's choice and is kept.
 */
function toolsOf(discovery: Discovery, found: readonly Found[]): DiscoveredTool[] {
  const { options } = discovery;
  const counts = new Map<string, number>();
  for (const f of found)
    counts.set(f.name ?? f.capability.name, (counts.get(f.name ?? f.capability.name) ?? 0) + 1);
  const seen = new Set<string>();
  const payees = options.payees ?? createPayeePins();
  const tools: DiscoveredTool[] = [];
  for (const f of found) {
    const key = `${f.seller.toLowerCase()}:${f.capability.name}:${f.name ?? ""}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const name =
      f.name ??
      ((counts.get(f.capability.name) ?? 0) > 1
        ? `${f.sellerName.replace(/[^a-zA-Z0-9_-]/g, "_")}_${f.capability.name}`.slice(0, 64)
        : f.capability.name);
    if (f.name !== undefined && (counts.get(f.name) ?? 0) > 1) {
      throw new TollgateError("InvalidRequest", `two tools are named ${f.name}: tool names must be unique`);
    }
    const capability: RemoteCapability = {
      name,
      description: f.description ?? f.capability.description,
      method: f.capability.method,
      url: f.url,
      input: f.capability.input,
    };
    tools.push({
      tool: paidTool(capability, {
        ...options,
        fetch: f.fetch ?? discovery.fetch,
        ...(f.maxPrice === undefined ? {} : { maxPrice: f.maxPrice }),
        listing: f.listing,
        payees,
        forecast: options.forecast === undefined ? undefined : () => options.forecast?.(name),
        onSpend: reportingUnreachable(f, options),
      }),
      capability,
      seller: f.seller,
      manifestCapability: f.capability,
    });
  }
  return tools;
}

/**
 * @example
 * const tools = await discoverTools({ market: "http://127.0.0.1:4030", agent: "researcher", payer, budget });
 * const brief = await discoverTools({ tools: [await loadTool("brief", { dir: toolsDir })], agent, payer, budget });
 */
export async function discoverTools(options: DiscoverToolsOptions): Promise<DiscoveredTool[]> {
  const discovery = discoveryOf(options);
  const found: Found[] = [
    ...(await foundInMarket(discovery)),
    ...(await foundByManifest(discovery)),
    ...(await foundOnMcpServers(discovery)),
  ];
  for (const manifest of await remoteToolManifests(options)) {
    found.push(
      await findRemoteTool(manifest, {
        fetch: discovery.fetch,
        network: discovery.network,
        marketAt: discovery.marketAt,
      }),
    );
  }
  return toolsOf(discovery, found);
}

/**
 * The `onSpend` of one tool: the caller's, plus a report to the seller's market when a call found the
 * seller down. One report per seller at a time; a failed report is logged and changes nothing else.
 */
function reportingUnreachable(
  found: Found,
  options: DiscoverToolsOptions,
): ((event: SpendEvent) => void) | undefined {
  const market = found.market;
  if (market === undefined) return options.onSpend;
  let reporting = false;
  return (event) => {
    options.onSpend?.(event);
    if (event.ok || event.error !== "SellerUnreachable" || reporting) return;
    reporting = true;
    market
      .report(found.seller)
      .then(
        (status) =>
          options.logger?.info(
            {
              seller: found.seller,
              market: market.url,
              reachable: status.reachable,
              checked: status.checked,
            },
            "reported an unreachable seller to the market",
          ),
        (err: unknown) =>
          options.logger?.warn(
            { seller: found.seller, market: market.url, err },
            "could not report a seller",
          ),
      )
      .finally(() => {
        reporting = false;
      });
  };
}

/** The seller and capability a remote tool manifest names, through its `manifestUrl` or `market`. */
async function findRemoteTool(
  manifest: RemoteToolManifest,
  context: { fetch: FetchFn; network: string; marketAt: (url: string) => MarketClient },
): Promise<Found> {
  const maxPrice = manifest.maxPrice === undefined ? undefined : parseUnitsExact(manifest.maxPrice);
  const own = {
    name: manifest.name,
    ...(manifest.description === undefined ? {} : { description: manifest.description }),
    ...(maxPrice === undefined ? {} : { maxPrice }),
  };
  if (manifest.manifestUrl !== undefined) {
    const seller = await fetchManifest(context.fetch, manifest.manifestUrl);
    const capability = seller.capabilities.find((c) => c.name === manifest.capability);
    if (capability === undefined) {
      throw new TollgateError(
        "NotFound",
        `tool ${manifest.name}: ${manifest.manifestUrl} sells no capability named ${manifest.capability}`,
        { details: { tool: manifest.name, capability: manifest.capability } },
      );
    }
    if (seller.network !== context.network) {
      throw new TollgateError(
        "UnsupportedNetwork",
        `tool ${manifest.name}: the seller settles on ${seller.network}, this agent pays on ${context.network}`,
        { details: { tool: manifest.name, network: seller.network } },
      );
    }
    if (maxPrice !== undefined && cheapestPerCallPrice(capability) > maxPrice) {
      throw new TollgateError(
        "PriceCeilingExceeded",
        `tool ${manifest.name}: ${manifest.capability} costs at least ${formatUnitsExact(cheapestPerCallPrice(capability))} USDC a call, over the manifest's maxPrice of ${manifest.maxPrice}`,
        { details: { tool: manifest.name } },
      );
    }
    return {
      seller: seller.seller.payTo,
      sellerName: seller.name,
      capability,
      url: capabilityUrl(seller, capability),
      listing: listingOf(seller, capability.pricing, "manifest"),
      ...own,
    };
  }
  const market = context.marketAt(manifest.market!);
  const { results } = await market.search({
    q: manifest.capability,
    network: context.network as `eip155:${number}`,
    ...(maxPrice === undefined ? {} : { maxPrice }),
    limit: 100,
  });
  // Exact name, the named seller if any; the catalog lists the cheapest of equals first.
  const matches = results.filter(
    (entry) =>
      entry.capability.name === manifest.capability &&
      (manifest.seller === undefined || sameAddress(entry.seller.address, manifest.seller)),
  );
  matches.sort((a, b) =>
    BigInt(a.price) < BigInt(b.price) ? -1 : BigInt(a.price) > BigInt(b.price) ? 1 : 0,
  );
  const best = matches[0];
  if (best === undefined) {
    throw new TollgateError(
      "NotFound",
      `tool ${manifest.name}: ${market.url} offers no ${manifest.capability}${manifest.seller === undefined ? "" : ` by ${manifest.seller}`}${manifest.maxPrice === undefined ? "" : ` at ${manifest.maxPrice} USDC or less`} on ${context.network}`,
      { details: { tool: manifest.name, capability: manifest.capability } },
    );
  }
  return {
    seller: best.seller.address,
    sellerName: best.seller.name,
    capability: best.capability,
    url: best.url,
    market,
    listing: listingOf(
      { seller: { payTo: best.seller.address }, network: best.network, token: best.token },
      best.capability.pricing,
      "market",
    ),
    ...own,
  };
}

/** Reads and checks a specialist's manifest: a signed one must be signed by its payout address. */
export async function fetchManifest(fetch: FetchFn, url: string): Promise<Manifest> {
  const target = url.endsWith(".json") ? url : `${url.replace(/\/+$/, "")}${MANIFEST_PATH}`;
  let response: Response;
  try {
    response = await fetch(target, { headers: { accept: "application/json" } });
  } catch (cause) {
    throw (
      sellerUnreachableError(cause, target) ??
      new TollgateError("NotFound", `cannot reach ${target}`, { cause })
    );
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
