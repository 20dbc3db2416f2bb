/**
 * The gate for MCP tool calls (docs/mcp.md): a thin adapter, like the Hono one, that reads the payment
 * credential from a call's `_meta` (src/protocol/mcpPayment.ts), asks the same framework-free core
 * (`paymentGate`) about the capability's HTTP route, and translates its answer into MCP terms: a
 * refusal becomes an `isError` tool result (payment required with its terms, or the §2.6 error), a
 * pass carries the settlement for the result's `_meta`. An x402 payment (`_meta["x402/payment"]`) is
 * verified before the tool runs and settled by `complete` only when it succeeded, as x402's own MCP
 * servers do; a tool that failed is not charged for.
 *
 * Invariants:
 * - One implementation of payment checks: memos, replay guard, prices, subscriptions and metering are
 *   the gate's. A tool call is priced as `POST <path>` of its capability, so a payment made for one
 *   tool (its memo binds the path) cannot buy another, and a payment is consumed once whichever
 *   transport presents it.
 * - `_meta` is untrusted: it is schema-checked and bounded before anything reads it; a bad one is an
 *   `InvalidRequest` tool error, never a thrown fault.
 * - Metered units come from the server (`units`), never from `_meta`.
 */

import { TollgateError } from "../../protocol/errors.ts";
import { HeaderName, safeDecodeJsonHeader } from "../../protocol/header.ts";
import {
  type McpErrorMeta,
  McpMetaKey,
  McpPaymentMetaSchema,
  type McpUsage,
} from "../../protocol/mcpPayment.ts";
import { summarizeIssues } from "../../protocol/parseWire.ts";
import { X402PaymentRequiredSchema, X402SettleResponseSchema } from "../../protocol/x402.ts";
import type { ServedSubscription } from "../../schemes/types.ts";
import { gateSchemes } from "../gateSchemes.ts";
import type { CompleteRequest, GatePayment, PaymentGate } from "../paymentGate.ts";

/** A tool call as the gate reads it: the capability's route path, the call's `_meta`, its units. */
export type McpGateCall = {
  /** The capability's HTTP path (`/summarize`): the route priced and the path memos bind. */
  path: string;
  /** The call's `params._meta`, as received. */
  meta: unknown;
  /** Metered units of the call, decided by the server from the parsed input. */
  units?: number | undefined;
} & McpCaller;

/**
 * Who calls, as the MCP server's transport saw them; never from the call's contents. Over HTTP the
 * request's socket peer (`GateRequest.remoteAddress`) and its `X-Forwarded-For` (believed only when the
 * peer is one of the gate's `trustedProxies`); over stdio nothing.
 */
export type McpCaller = {
  remoteAddress?: string | undefined;
  forwardedFor?: string | undefined;
};

/** An MCP `CallToolResult` as plain data (the SDK's type is structurally the same). */
export type McpToolResult = {
  content: { type: "text"; text: string }[];
  structuredContent?: Record<string, unknown> | undefined;
  isError?: boolean | undefined;
  _meta?: Record<string, unknown> | undefined;
};

/**
 * `pass`: run the tool, report how it went with `complete` (a status ≥ 500 hands a proof back, as over
 * HTTP; an x402 payment is settled only for a status below 400), then add `meta` to its result's
 * `_meta`. `meta` is read after `complete`: it carries the settlement (`x402/payment-response`), which
 * for an x402 payment exists only then (`success: false` when the tool failed and nothing was taken).
 * When `complete` answers a result, the settlement failed after the tool ran: answer that result (a
 * payment-required or error result; nothing was charged) instead of the tool's.
 * `respond`: answer `result` without running it.
 */
export type McpGateResult =
  | {
      kind: "pass";
      paid?: GatePayment | undefined;
      subscription?: ServedSubscription | undefined;
      readonly meta: Record<string, unknown>;
      complete: McpCompleteCall;
    }
  | { kind: "respond"; result: McpToolResult };

/** `CompleteRequest` in MCP terms: a result to answer instead of the tool's, when it resolves with one. */
export type McpCompleteCall = (status: number) => Promise<McpToolResult | undefined>;

export type McpPaymentGate = (call: McpGateCall) => Promise<McpGateResult>;

/** `_meta` keys of the built-in parts' credentials, with the header each goes to or the headers it becomes. */
const metaCredentials = gateSchemes.flatMap((scheme) => Object.entries(scheme.gate?.mcp?.credentials ?? {}));

/** The request headers of the credential `_meta` carries (at most one); a refusal when it cannot become them. */
function setCredentialHeaders(headers: Headers, meta: Record<string, unknown>): McpGateResult | undefined {
  for (const [key, becomes] of metaCredentials) {
    const value = meta[key];
    if (value === undefined) continue;
    if (typeof becomes === "string") {
      if (typeof value === "string") headers.set(becomes, value);
      continue;
    }
    try {
      for (const [name, text] of Object.entries(becomes(value))) headers.set(name, text);
    } catch (error) {
      const message = error instanceof TollgateError ? error.message : "not encodable";
      return refusal("InvalidRequest", `_meta["${key}"]: ${message}`, { status: 400 });
    }
  }
  return undefined;
}
/** Response headers of the built-in parts' receipts, with the `_meta` key each goes to. */
const metaReceipts = gateSchemes.flatMap((scheme) => Object.entries(scheme.gate?.mcp?.receipts ?? {}));

/** Largest gate answer read back (a 402 with 32 options fits many times over). */
const MAX_ANSWER_BYTES = 256 * 1024;

/**
 * @example
 * const gateCall = mcpPaymentGate(paymentGate({ …, routes: { "POST /summarize": { price: "0.02" } } }));
 * const outcome = await gateCall({ path: "/summarize", meta: request.params._meta });
 * if (outcome.kind === "respond") return outcome.result;
 */
export function mcpPaymentGate(gate: PaymentGate): McpPaymentGate {
  return async function mcpPaymentGate(call) {
    const headers = new Headers();
    const meta = McpPaymentMetaSchema.safeParse(call.meta ?? {});
    if (!meta.success) {
      const problems = summarizeIssues(meta.error.issues)
        .map((issue) => `${issue.path === "" ? "_meta" : issue.path}: ${issue.message}`)
        .join("; ");
      return refusal("InvalidRequest", `_meta: ${problems}`, { status: 400 });
    }
    const refused = setCredentialHeaders(headers, meta.data);
    if (refused !== undefined) return refused;
    if (call.forwardedFor !== undefined) headers.set("x-forwarded-for", call.forwardedFor);
    const result = await gate({
      method: "POST",
      url: call.path,
      headers,
      units: call.units,
      remoteAddress: call.remoteAddress,
    });
    if (result.kind === "respond") return { kind: "respond", result: await toolResultOf(result.response) };
    const complete: CompleteRequest = result.complete;
    return {
      kind: "pass",
      paid: result.paid,
      subscription: result.subscription,
      // Read when asked: an x402 settlement is added to the headers by `complete`.
      get meta() {
        return settlementMeta(result.headers);
      },
      async complete(status) {
        const instead = await complete(status);
        return instead instanceof Response ? toolResultOf(instead) : undefined;
      },
    };
  };
}

/** The `_meta` of a paid result: the settlement and, for a metered call, its units and overage. */
function settlementMeta(headers: Headers): Record<string, unknown> {
  const meta: Record<string, unknown> = {};
  // Both headers carry `{ success, transaction, network, payer }`: x402's SettlementResponse shape.
  const settled = headers.get(HeaderName.X402PaymentResponse) ?? headers.get(HeaderName.PaymentResponse);
  if (settled !== null) {
    const decoded = safeDecodeJsonHeader(settled, X402SettleResponseSchema);
    if (decoded.ok) meta[McpMetaKey.X402PaymentResponse] = decoded.value;
  }
  for (const [header, key] of metaReceipts) {
    const receipt = headers.get(header);
    if (receipt !== null) meta[key] = receipt;
  }
  const units = headers.get(HeaderName.Units);
  const overage = headers.get(HeaderName.OverageCharge);
  if (units !== null && overage !== null) {
    meta[McpMetaKey.TollgateUsage] = { units, overage } satisfies McpUsage;
  }
  return meta;
}

/**
 * A gate's refusal as a tool result. A 402 becomes x402's payment-required result (the x402 object
 * from `PAYMENT-REQUIRED` when the gate sells a one-time payment, else the Tollgate body), with the
 * Tollgate body under `_meta["tollgate/payment-required"]`; any other status the §2.6 error body.
 */
export async function toolResultOf(response: Response): Promise<McpToolResult> {
  const text = await response.text();
  let body: unknown;
  try {
    body = text.length <= MAX_ANSWER_BYTES ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  const object = typeof body === "object" && body !== null ? (body as Record<string, unknown>) : undefined;
  if (response.status === 402 && object !== undefined) {
    const header = response.headers.get(HeaderName.X402PaymentRequired);
    const x402 = header === null ? undefined : safeDecodeJsonHeader(header, X402PaymentRequiredSchema);
    const structured = x402?.ok === true ? (x402.value as Record<string, unknown>) : object;
    return {
      isError: true,
      structuredContent: structured,
      content: [{ type: "text", text: JSON.stringify(structured) }],
      _meta: { [McpMetaKey.TollgatePaymentRequired]: object },
    };
  }
  const retryAfter = Number(response.headers.get(HeaderName.RetryAfter) ?? Number.NaN);
  const errorMeta: McpErrorMeta = {
    status: response.status >= 400 && response.status <= 599 ? response.status : 500,
    ...(Number.isSafeInteger(retryAfter) && retryAfter >= 0 ? { retryAfter } : {}),
  };
  const structured = object ?? { error: { code: "Internal", message: "the payment could not be checked" } };
  return {
    isError: true,
    structuredContent: structured,
    content: [{ type: "text", text: JSON.stringify(structured) }],
    _meta: { [McpMetaKey.TollgateError]: errorMeta },
  };
}

/** A refusal made before the gate was asked (a malformed `_meta`). */
function refusal(code: "InvalidRequest", message: string, meta: McpErrorMeta): McpGateResult {
  const structured = { error: { code, message } };
  return {
    kind: "respond",
    result: {
      isError: true,
      structuredContent: structured,
      content: [{ type: "text", text: JSON.stringify(structured) }],
      _meta: { [McpMetaKey.TollgateError]: meta },
    },
  };
}
