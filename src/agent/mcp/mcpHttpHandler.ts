/**
 * The MCP Streamable HTTP endpoint of a specialist (docs/mcp.md): stateless, one MCP server and
 * transport per POST, answered as JSON. A stateless endpoint keeps nothing between requests, so any
 * instance behind a load balancer can answer any call, and no session can be hijacked or exhausted.
 *
 * GET (a standalone SSE stream) and DELETE (ending a session) have no meaning without sessions: 405,
 * as the transport specification allows.
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import type { McpCaller } from "../../gate/mcp/mcpPaymentGate.ts";

/** Largest JSON-RPC body read (a tool call's arguments and `_meta`); larger is answered 413. */
export const MCP_MAX_BODY_BYTES = 256 * 1024;

/**
 * @example
 * app.all("/mcp", (c) => handle(c.req.raw));  // handle = mcpHttpHandler(newServer)
 */
export function mcpHttpHandler(
  newServer: (caller?: McpCaller) => Server,
  options: { maxBodyBytes?: number | undefined } = {},
): (request: Request, remoteAddress?: string) => Promise<Response> {
  /** `remoteAddress`: the request's socket peer, as the host's server saw it (never a header). */
  return async function mcpHttpHandler(request, remoteAddress) {
    if (request.method !== "POST") {
      return Response.json(
        {
          jsonrpc: "2.0",
          error: { code: -32000, message: "Method not allowed: this endpoint is stateless, POST only" },
          id: null,
        },
        { status: 405, headers: { allow: "POST" } },
      );
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
      // No sessionIdGenerator: stateless.
      enableJsonResponse: true,
      maxRequestBodySize: options.maxBodyBytes ?? MCP_MAX_BODY_BYTES,
    });
    const server = newServer({
      remoteAddress,
      forwardedFor: request.headers.get("x-forwarded-for") ?? undefined,
    });
    await server.connect(transport);
    try {
      return await transport.handleRequest(request);
    } finally {
      // The JSON answer is complete once handleRequest resolves: nothing outlives the request.
      await server.close().catch(() => undefined);
    }
  };
}
