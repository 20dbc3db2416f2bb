/**
 * MCP clients an agent buys through (docs/mcp.md, "Buying"): one SDK client per server, over
 * Streamable HTTP (a URL) or stdio (a command the agent starts), kept for the agent's run and closed
 * together. A stdio server's tools are addressed as `http://<hash>.stdio.invalid/mcp#<tool>`: a name
 * that never resolves, stable for the same command, so budgets, payee pins and subscriptions keyed by
 * origin keep working without anything being fetched from it.
 */
import { createHash } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { HttpUrlSchema } from "../../protocol/paymentRequired.ts";
import type { McpToolCaller } from "./mcpToolFetch.ts";

/** A local MCP server the agent starts and talks to over stdio. */
export const McpStdioServerSchema = z.strictObject({
  command: z.string().min(1).max(1024),
  args: z.array(z.string().max(4096)).max(64).optional(),
  /** Environment of the server process (default: the SDK's safe subset of the agent's). */
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().max(4096).optional(),
});
export type McpStdioServer = z.infer<typeof McpStdioServerSchema>;

/** An MCP server: its Streamable HTTP URL, or a stdio command. */
export const McpServerRefSchema = z.union([HttpUrlSchema, McpStdioServerSchema]);
export type McpServerRef = z.infer<typeof McpServerRefSchema>;

export type McpConnection = {
  /** The URL tools of this server are addressed under (`<url>#<tool>`); origin-keyed state uses it. */
  readonly url: string;
  readonly client: Client;
  /** Every tool the server lists (pages followed, at most `MAX_TOOLS`). */
  listTools(): Promise<Tool[]>;
  callTool: McpToolCaller;
};

export type McpConnections = {
  /** The connection to `server`, made on first use and shared after. */
  connect(server: McpServerRef): Promise<McpConnection>;
  /** Closes every client (and ends stdio servers). */
  close(): Promise<void>;
};

/** Most tools read from one server; a server listing more is read up to here. */
export const MAX_TOOLS = 256;
/** Longest a tool call may take before it is given up (the SDK's default is 60 s). */
const CALL_TIMEOUT_MS = 120_000;

/**
 * @example
 * const mcp = createMcpConnections();
 * const tools = await discoverTools({ mcpServers: ["http://127.0.0.1:4101/mcp"], mcpConnections: mcp, agent, payer, budget });
 * await mcp.close();
 */
export function createMcpConnections(
  options: { fetch?: FetchFn | undefined; clientName?: string | undefined } = {},
): McpConnections {
  const connections = new Map<string, Promise<McpConnection>>();
  const open = async (server: McpServerRef): Promise<McpConnection> => {
    const ref = McpServerRefSchema.safeParse(server);
    if (!ref.success) {
      throw new TollgateError(
        "InvalidRequest",
        "an MCP server is an http(s) URL or { command, args?, env?, cwd? }",
      );
    }
    const client = new Client({ name: options.clientName ?? "tollgate-agent", version: "1.0.0" });
    let url: string;
    if (typeof ref.data === "string") {
      url = ref.data;
      const transport = new StreamableHTTPClientTransport(new URL(url), {
        ...(options.fetch === undefined ? {} : { fetch: options.fetch as never }),
      });
      await client.connect(transport);
    } else {
      const { command, args, env, cwd } = ref.data;
      const id = createHash("sha256")
        .update(JSON.stringify([command, args ?? [], cwd ?? ""]))
        .digest("hex")
        .slice(0, 16);
      url = `http://${id}.stdio.invalid/mcp`;
      const transport = new StdioClientTransport({
        command,
        ...(args === undefined ? {} : { args }),
        ...(env === undefined ? {} : { env }),
        ...(cwd === undefined ? {} : { cwd }),
        stderr: "inherit",
      });
      await client.connect(transport);
    }
    return {
      url,
      client,
      async listTools() {
        const tools: Tool[] = [];
        let cursor: string | undefined;
        do {
          const page = await client.listTools(cursor === undefined ? undefined : { cursor });
          tools.push(...page.tools);
          cursor = page.nextCursor;
        } while (cursor !== undefined && tools.length < MAX_TOOLS);
        return tools.slice(0, MAX_TOOLS);
      },
      callTool: (params, { signal }) =>
        client.callTool(params, undefined, {
          ...(signal === undefined ? {} : { signal }),
          timeout: CALL_TIMEOUT_MS,
        }),
    };
  };
  return {
    connect(server) {
      const key = typeof server === "string" ? server : JSON.stringify(server);
      let connection = connections.get(key);
      if (connection === undefined) {
        connection = open(server);
        connections.set(key, connection);
        // A failed connect is not cached: the next call tries again.
        connection.catch(() => connections.delete(key));
      }
      return connection;
    },
    async close() {
      const all = [...connections.values()];
      connections.clear();
      await Promise.all(
        all.map(async (connection) => {
          try {
            await (await connection).client.close();
          } catch {
            // Already closed or never connected.
          }
        }),
      );
    },
  };
}
