/**
 * MCP helpers for the MCP suites: a standard SDK client over Streamable HTTP, and a way to read the
 * parts of a tool result the payment flow uses.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpMetaKey } from "../../src/protocol/mcpPayment.ts";
import type { PaymentRequired } from "../../src/protocol/paymentRequired.ts";

export type ToolResult = {
  content?: unknown;
  structuredContent?: Record<string, unknown> | undefined;
  isError?: boolean | undefined;
  _meta?: Record<string, unknown> | undefined;
};

/** A standard MCP client (the SDK's, unchanged) connected to `url` over Streamable HTTP. */
export async function connectHttpClient(url: string): Promise<Client> {
  const client = new Client({ name: "tollgate-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/** Calls a tool with `_meta`, as any MCP client may. */
export async function callTool(
  client: Client,
  name: string,
  args: Record<string, unknown>,
  meta?: Record<string, unknown>,
): Promise<ToolResult> {
  return (await client.callTool({
    name,
    arguments: args,
    ...(meta === undefined ? {} : { _meta: meta }),
  })) as ToolResult;
}

/** The Tollgate 402 body a payment-required result carries. */
export function tollgateTerms(result: ToolResult): PaymentRequired {
  const body = result._meta?.[McpMetaKey.TollgatePaymentRequired];
  if (body === undefined)
    throw new Error(`not a payment-required result: ${JSON.stringify(result).slice(0, 300)}`);
  return body as PaymentRequired;
}

/** The text of a result's first content block. */
export function textOf(result: ToolResult): string {
  const content = result.content as { type: string; text?: string }[] | undefined;
  return content?.[0]?.text ?? "";
}
