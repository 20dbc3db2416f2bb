/**
 * What `discoverTools` needs to buy over MCP (docs/mcp.md, "Buying"): a lazily connected `fetch` per
 * tool (`mcpToolFetch` over a shared client), and the tools of MCP servers as discovered
 * capabilities. Tools of a bare MCP server come with no signed listing: the paid tool pins the first
 * payee the server names, as for any tool without a manifest (docs/budgets.md).
 */
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import type { Capability, ManifestPricing } from "../../protocol/manifest.ts";
import { CapabilityNameSchema, ManifestPricingSchema } from "../../protocol/manifest.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import type { McpConnections, McpServerRef } from "./mcpConnections.ts";
import { mcpToolFetch } from "./mcpToolFetch.ts";

/** The address of one MCP tool as paid tools name it: the server's URL with the tool as fragment. */
export function mcpToolUrl(serverUrl: string, toolName: string): string {
  return `${serverUrl.replace(/#.*$/, "")}#${encodeURIComponent(toolName)}`;
}

/** A `fetch` that calls `toolName` on `server`, connecting on first use (shared through `connections`). */
export function lazyMcpFetch(connections: McpConnections, server: McpServerRef, toolName: string): FetchFn {
  let fetch: FetchFn | undefined;
  return async (input, init) => {
    if (fetch === undefined) {
      const connection = await connections.connect(server);
      fetch = mcpToolFetch(connection.callTool, toolName);
    }
    return fetch(input, init);
  };
}

/** One tool of an MCP server, as discovery turns it into a paid tool. */
export type McpDiscoveredTool = {
  /** The server's name (its `initialize` answer), for prefixing clashing tool names. */
  serverName: string;
  /** The URL the server's tools are addressed under (see `mcpToolUrl`). */
  serverUrl: string;
  capability: Capability;
  url: string;
  fetch: FetchFn;
};

/**
 * Lists the tools of each server. A tool whose name is not tool-safe is skipped (a model could not
 * call it); its input schema is the server's; pricing is what the server states in
 * `_meta["tollgate/pricing"]`, when valid, else none (the price is learnt from its payment-required
 * answer and held to `maxPrice` and the budget).
 */
export async function mcpServerTools(
  servers: readonly McpServerRef[],
  connections: McpConnections,
): Promise<McpDiscoveredTool[]> {
  const found: McpDiscoveredTool[] = [];
  for (const server of servers) {
    const connection = await connections.connect(server);
    const serverName = connection.client.getServerVersion()?.name ?? new URL(connection.url).host;
    for (const tool of await connection.listTools()) {
      if (!CapabilityNameSchema.safeParse(tool.name).success) continue;
      found.push({
        serverName,
        serverUrl: connection.url,
        capability: capabilityOf(tool),
        url: mcpToolUrl(connection.url, tool.name),
        fetch: mcpToolFetch(connection.callTool, tool.name),
      });
    }
  }
  return found;
}

function capabilityOf(tool: Tool): Capability {
  const stated = tool._meta?.[McpMetaKey.TollgatePricing];
  const pricing: ManifestPricing[] = Array.isArray(stated)
    ? stated.slice(0, 8).flatMap((entry) => {
        const parsed = ManifestPricingSchema.safeParse(entry);
        return parsed.success ? [parsed.data] : [];
      })
    : [];
  return {
    name: tool.name,
    description: (tool.description ?? tool.title ?? tool.name).slice(0, 2000),
    method: "POST",
    path: "/mcp",
    input: tool.inputSchema as Capability["input"],
    output: true,
    pricing,
  };
}
