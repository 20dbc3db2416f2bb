/**
 * The MCP transport of paid tools (docs/mcp.md, "Buying"): a `fetch` that sends each request as one
 * MCP `tools/call` and reads the result back as the HTTP answer a gate would have given, so the paid
 * tool wrapper (budget, policy, offer checks, subscriptions, receipts) works over MCP unchanged.
 *
 * Request → call: the JSON body is the tool's arguments; `X-PAYMENT` becomes
 * `_meta["tollgate/payment"]`, `PAYMENT-SIGNATURE` `_meta["x402/payment"]` (decoded), and the
 * subscription headers `_meta["tollgate/subscription"]`.
 * Result → response: payment required (x402's `isError` result with `PaymentRequired`, or the older
 * JSON-RPC error 402 with it in `error.data`) is a 402 with Tollgate's body when the seller sent one
 * and x402's `PAYMENT-REQUIRED`; another tool error is its `_meta["tollgate/error"]` status (502 from
 * a server that states none) with its body; a result is a 200 with the settlement and metered usage
 * as the gate's headers.
 *
 * Everything a server returns is untrusted: parsed with zod, bounded, and never thrown as our own.
 */
import { McpError, ErrorCode as McpErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import {
  MCP_PAYMENT_REQUIRED_CODE,
  McpErrorMetaSchema,
  McpMetaKey,
  McpUsageSchema,
} from "../../protocol/mcpPayment.ts";
import { PaymentRequiredSchema } from "../../protocol/paymentRequired.ts";
import { X402PaymentRequiredSchema, X402SettleResponseSchema } from "../../protocol/x402.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { defaultAgentSchemes } from "../agentSchemes.ts";

/** One `tools/call`, as an SDK `Client.callTool` makes it. */
export type McpToolCaller = (
  params: { name: string; arguments: Record<string, unknown>; _meta?: Record<string, unknown> },
  options: { signal?: AbortSignal | undefined },
) => Promise<unknown>;

/** Largest request body (the tool's arguments) sent as one call. */
const MAX_ARGUMENT_BYTES = 256 * 1024;

const ToolResultSchema = z.looseObject({
  content: z.array(z.looseObject({ type: z.string(), text: z.string().optional() })).optional(),
  structuredContent: z.record(z.string(), z.unknown()).optional(),
  isError: z.boolean().optional(),
  _meta: z.record(z.string(), z.unknown()).optional(),
});
type ToolResult = z.infer<typeof ToolResultSchema>;

/**
 * @example
 * const fetch = mcpToolFetch((params, { signal }) => client.callTool(params, undefined, { signal }), "summarize");
 * const tool = paidTool({ name: "summarize", …, url: "http://127.0.0.1:4101/mcp#summarize" }, { …, fetch });
 */
export function mcpToolFetch(
  call: McpToolCaller,
  toolName: string,
  schemes: AgentSchemes = defaultAgentSchemes,
): FetchFn {
  return async function mcpToolFetch(input, init) {
    const request = new Request(input, init);
    const body = await request.text();
    if (body.length > MAX_ARGUMENT_BYTES) {
      throw new TollgateError("PayloadTooLarge", `${toolName}: arguments over ${MAX_ARGUMENT_BYTES} bytes`);
    }
    let args: unknown = {};
    if (body !== "") {
      try {
        args = JSON.parse(body);
      } catch (cause) {
        throw new TollgateError("InvalidRequest", `${toolName}: arguments are not JSON`, { cause });
      }
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      throw new TollgateError("InvalidRequest", `${toolName}: arguments must be a JSON object`);
    }
    const meta = paymentMetaOf(request.headers, schemes.mcpCredentials);
    let result: unknown;
    try {
      result = await call(
        {
          name: toolName,
          arguments: args as Record<string, unknown>,
          ...(Object.keys(meta).length === 0 ? {} : { _meta: meta }),
        },
        { signal: request.signal },
      );
    } catch (error) {
      // Earlier x402 MCP drafts: a JSON-RPC error 402 with the requirements in `error.data`.
      if (error instanceof McpError && error.code === MCP_PAYMENT_REQUIRED_CODE) {
        return paymentRequired(error.data, undefined) ?? errorResponse(502, "PaymentRequired", error.message);
      }
      if (error instanceof McpError && error.code === McpErrorCode.InvalidParams) {
        return errorResponse(400, "InvalidRequest", error.message);
      }
      throw error;
    }
    const parsed = ToolResultSchema.safeParse(result);
    if (!parsed.success)
      return errorResponse(502, "InvalidResponse", `${toolName}: the result is not a tool result`);
    return responseOf(parsed.data, request.headers.has(HeaderName.X402PaymentSignature), schemes.mcpReceipts);
  };
}

/** The payment headers a paid retry carries, as `_meta` entries (each scheme's agent part names its own). */
function paymentMetaOf(
  headers: Headers,
  credentials: AgentSchemes["mcpCredentials"],
): Record<string, unknown> {
  const meta: Record<string, unknown> = {};
  for (const [key, from] of credentials) {
    const value = typeof from === "string" ? (headers.get(from) ?? undefined) : from(headers);
    if (value !== undefined) meta[key] = value;
  }
  return meta;
}

/**
 * A tool result as the HTTP answer a paid tool reads: its payment response, usage, and the receipts
 * the schemes' agent parts carry over MCP (`receipts`: `[_meta key, header]`).
 */
function responseOf(
  result: ToolResult,
  paidWithX402: boolean,
  receipts: AgentSchemes["mcpReceipts"],
): Response {
  const text = result.content?.find((block) => block.type === "text")?.text;
  if (result.isError === true) {
    const required = paymentRequired(
      result.structuredContent ?? jsonOf(text),
      result._meta?.[McpMetaKey.TollgatePaymentRequired],
    );
    if (required !== undefined) return required;
    const stated = McpErrorMetaSchema.safeParse(result._meta?.[McpMetaKey.TollgateError]);
    const status = stated.success ? stated.data.status : 502;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (stated.success && stated.data.retryAfter !== undefined) {
      headers[HeaderName.RetryAfter] = String(stated.data.retryAfter);
    }
    const body = result.structuredContent ?? {
      error: { code: "ToolError", message: (text ?? "the tool failed").slice(0, 1000) },
    };
    return new Response(JSON.stringify(body), { status, headers });
  }
  const headers = new Headers({ "content-type": "application/json" });
  const settled = X402SettleResponseSchema.safeParse(result._meta?.[McpMetaKey.X402PaymentResponse]);
  if (settled.success) {
    headers.set(
      paidWithX402 ? HeaderName.X402PaymentResponse : HeaderName.PaymentResponse,
      encodeJsonHeader(settled.data),
    );
  }
  for (const [metaKey, header] of receipts) {
    const receipt = result._meta?.[metaKey];
    if (typeof receipt === "string" && receipt.length <= 1024) headers.set(header, receipt);
  }
  const usage = McpUsageSchema.safeParse(result._meta?.[McpMetaKey.TollgateUsage]);
  if (usage.success) {
    headers.set(HeaderName.Units, usage.data.units);
    headers.set(HeaderName.OverageCharge, usage.data.overage);
  }
  const body = text ?? JSON.stringify(result.structuredContent ?? null);
  return new Response(body, { status: 200, headers });
}

/**
 * A 402 for a payment-required answer: Tollgate's body when the seller sent a valid one, and x402's
 * `PAYMENT-REQUIRED` when the answer holds a valid x402 v2 `PaymentRequired`; `undefined` when it is
 * neither (an ordinary tool error).
 */
function paymentRequired(x402Candidate: unknown, tollgateCandidate: unknown): Response | undefined {
  const tollgate = PaymentRequiredSchema.safeParse(tollgateCandidate ?? x402Candidate);
  const x402 = X402PaymentRequiredSchema.safeParse(x402Candidate);
  if (!tollgate.success && !x402.success) return undefined;
  const headers = new Headers({ "content-type": "application/json" });
  if (x402.success) {
    try {
      headers.set(HeaderName.X402PaymentRequired, encodeJsonHeader(x402.data));
    } catch {
      // Larger than any header we read: paid only through Tollgate's body, if any.
      if (!tollgate.success) return undefined;
    }
  }
  return new Response(tollgate.success ? JSON.stringify(tollgateCandidate ?? x402Candidate) : "", {
    status: 402,
    headers,
  });
}

function jsonOf(text: string | undefined): unknown {
  if (text === undefined || text.length > 256 * 1024) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function errorResponse(status: number, code: string, message: string): Response {
  return new Response(JSON.stringify({ error: { code, message: message.slice(0, 1000) } }), {
    status,
    headers: { "content-type": "application/json" },
  });
}
