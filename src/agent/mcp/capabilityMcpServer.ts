/**
 * A specialist's capabilities as an MCP server (docs/mcp.md, "Selling"): one tool per capability,
 * its input JSON Schema from the capability's zod schema, its description ending with its price, and
 * every call of a paid tool through the gate (src/gate/mcp/mcpPaymentGate.ts) before the handler runs.
 *
 * Invariants:
 * - `tools/list` and free tools need no payment; `tools/list` shows what the signed manifest shows
 *   (name, description, input schema, listed pricing) and nothing else.
 * - The input is parsed before the gate is asked: a malformed call is refused and never charged, and
 *   metered units come from the parsed input (`capability.units`), never from the caller.
 * - A paid call whose handler fails reports its status to the gate (≥ 500 gives a proof back, as
 *   over HTTP; an x402 payment is settled only after the handler succeeded, so a failed one is not
 *   charged and its result says so in `_meta["x402/payment-response"]`); a thrown error that is not a
 *   `TollgateError` is told to the caller without internals.
 * - A reseller's sale (a capability with `admission`, src/agent/saleAdmission.ts) is reserved in its
 *   budget before the gate is asked, as over HTTP: an unpaid call is refused with `SaleNotAdmitted`
 *   instead of terms when no sale could be reserved now, and a paid one before its payment is consumed
 *   (the proof stays good to send again). Terms keep the sale reserved for the memos they name, so the
 *   paid call finds it; a paid call whose handler failed (≥ 500, the proof comes back) keeps it for its
 *   proof's memo, so the re-sent proof finds its sale admitted with what its purchases already drew.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type Tool,
} from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import { z } from "zod";
import type { McpCaller, McpPaymentGate, McpToolResult } from "../../gate/mcp/mcpPaymentGate.ts";
import type { GatePayment } from "../../gate/paymentGate.ts";
import { systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import { McpMetaKey, McpPaymentMetaSchema } from "../../protocol/mcpPayment.ts";
import { summarizeIssues } from "../../protocol/parseWire.ts";
import type { ServedSubscription } from "../../schemes/types.ts";
import {
  type AdmittedSale,
  admissionOf,
  admitSale,
  createOfferBook,
  fundedSale,
  memoOfProof,
  memosOfPaymentRequired,
  OFFER_TTL_MS,
  type OfferBook,
  type SaleRequest,
} from "../saleAdmission.ts";
import type { Capability, CapabilityContext } from "../tools/capability.ts";
import { withPricing } from "../tools/describePricing.ts";

export type CapabilityMcpServerOptions = {
  name: string;
  version?: string | undefined;
  /** Shown to clients as the server's instructions. */
  description?: string | undefined;
  /** Paid capabilities: each call passes the gate as `POST pathOf(capability)`. */
  capabilities: readonly Capability[];
  /** Capabilities served without payment (MCP only: the HTTP host sells every route it serves). */
  freeTools?: readonly Capability[] | undefined;
  gate: McpPaymentGate;
  pathOf(capability: Capability): string;
  /** The listed pricing of a paid capability (as in the manifest). */
  pricing(capability: Capability): ManifestPricing[];
  /** The sale a paid call is, for handlers that spend on it (see `CapabilityContext.sale`). */
  sale?:
    | ((
        payment: GatePayment | undefined,
        subscription: ServedSubscription | undefined,
      ) => CapabilityContext["sale"])
    | undefined;
  /**
   * The open offers (402s) of an admissible capability, shared with its HTTP route when it has one.
   * Default: a book per capability, kept by this server (120 s offers, the system clock).
   */
  offers?: ((capability: Capability) => OfferBook | undefined) | undefined;
  logger?: Pick<Logger, "error" | "warn"> | undefined;
};

type Entry = { capability: Capability; paid: boolean; tool: Tool };

/** What the servers of one factory share: the options, the tools by name and the open offers. */
type McpServerParts = {
  options: CapabilityMcpServerOptions;
  entries: Map<string, Entry>;
  tools: Tool[];
  offersOf: (capability: Capability) => OfferBook;
};

/** The tools, by name: paid capabilities with their pricing (in the description and `_meta`), then free ones. */
function toolEntries(options: CapabilityMcpServerOptions): Map<string, Entry> {
  const entries = new Map<string, Entry>();
  const add = (capability: Capability, paid: boolean) => {
    if (entries.has(capability.name)) {
      throw new TollgateError("InvalidRequest", `MCP tool name ${capability.name} is used twice`);
    }
    const pricing = paid ? options.pricing(capability) : [];
    const tool: Tool = {
      name: capability.name,
      description: paid ? withPricing(capability.description, pricing) : capability.description,
      inputSchema: z.toJSONSchema(capability.input, {
        io: "input",
        unrepresentable: "any",
      }) as Tool["inputSchema"],
      ...(paid ? { _meta: { [McpMetaKey.TollgatePricing]: pricing } } : {}),
    };
    entries.set(capability.name, { capability, paid, tool });
  };
  for (const capability of options.capabilities) add(capability, true);
  for (const capability of options.freeTools ?? []) add(capability, false);
  return entries;
}

/** A capability's open offers: the book shared with its HTTP route, else one this factory keeps. */
function offerBooks(options: CapabilityMcpServerOptions): (capability: Capability) => OfferBook {
  const ownOffers = new Map<Capability, OfferBook>();
  return (capability) => {
    const shared = options.offers?.(capability);
    if (shared !== undefined) return shared;
    let own = ownOffers.get(capability);
    if (own === undefined) {
      own = createOfferBook(systemClock, OFFER_TTL_MS);
      ownOffers.set(capability, own);
    }
    return own;
  };
}

/** The units a metered call draws (`capability.units(input)`), or the tool error when they are not a count. */
function unitsOf(
  capability: Capability,
  input: Record<string, unknown>,
): { units: number | undefined } | { error: McpToolResult } {
  if (capability.units === undefined) return { units: undefined };
  const units = capability.units(input);
  if (!Number.isSafeInteger(units) || units < 0) {
    return {
      error: errorResult(
        new TollgateError("Internal", `capability ${capability.name}: units() returned ${String(units)}`),
      ),
    };
  }
  return { units };
}

/**
 * A successful or failed tool's result with the payment's `_meta`. A failure carries only the news
 * that an x402 payment was not taken (`success: false`); a proof's receipt is not attached to a failure.
 */
function withPaymentMeta(result: McpToolResult, meta: Record<string, unknown>): McpToolResult {
  if (result.isError === true) {
    const settlement = meta[McpMetaKey.X402PaymentResponse] as { success?: unknown } | undefined;
    if (settlement?.success !== false) return result;
    return { ...result, _meta: { ...result._meta, [McpMetaKey.X402PaymentResponse]: settlement } };
  }
  return { ...result, _meta: { ...result._meta, ...meta } };
}

/**
 * A paid call through the gate: answered by the gate (a 402), or the handler run and the payment
 * completed with the tool's status; the admitted sale, if any, is told how the call was answered.
 */
async function sellCall(
  parts: McpServerParts,
  call: { capability: Capability; input: Record<string, unknown>; units: number | undefined },
  meta: unknown,
  signal: AbortSignal,
  caller: McpCaller | undefined,
  sale: AdmittedSale | undefined,
): Promise<McpToolResult> {
  const { options } = parts;
  const { capability, units } = call;
  // Not answered (the gate or a hook threw): released, as nothing tells whether a proof came back.
  let answer: Parameters<AdmittedSale["answered"]>[0] = { status: 0 };
  try {
    const outcome = await options.gate({ path: options.pathOf(capability), meta, units, ...caller });
    if (outcome.kind === "respond") {
      answer = answerOf(outcome.result);
      return outcome.result;
    }
    const result = await runHandler(
      capability,
      call.input,
      { signal, sale: fundedSale(options.sale?.(outcome.paid, outcome.subscription), sale?.ticket) },
      options.logger,
    );
    // A failed tool is never reported below 400, so that an x402 payment is not settled for it.
    const status = result.isError === true ? Math.max(statusOf(result), 400) : 200;
    answer = { status };
    const instead = await outcome.complete(status);
    if (instead !== undefined) {
      // Settled after the tool ran, and the settlement failed: nothing was charged, and nothing of
      // the tool's result is sent (x402's MCP transport says so too).
      answer = answerOf(instead);
      return instead;
    }
    return withPaymentMeta(result, outcome.meta);
  } finally {
    await sale?.answered(answer);
  }
}

/** One `tools/call`: the input checked, a free tool run, a paid one's units read and sale admitted, then sold. */
async function callTool(
  parts: McpServerParts,
  name: string,
  args: unknown,
  meta: unknown,
  signal: AbortSignal,
  caller: McpCaller | undefined,
): Promise<McpToolResult> {
  const entry = parts.entries.get(name);
  if (entry === undefined)
    throw new McpError(ErrorCode.InvalidParams, `unknown tool ${JSON.stringify(name.slice(0, 64))}`);
  const { capability } = entry;
  const input = capability.input.safeParse(args ?? {});
  if (!input.success) {
    return errorResult(
      new TollgateError("InvalidRequest", `input does not match ${capability.name}'s schema`, {
        details: { issues: summarizeIssues(input.error.issues) },
      }),
    );
  }
  if (!entry.paid) return runHandler(capability, input.data, { signal }, parts.options.logger);
  const units = unitsOf(capability, input.data);
  if ("error" in units) return units.error;
  const admission = admissionOf(capability);
  let sale: AdmittedSale | undefined;
  if (admission !== undefined) {
    try {
      sale = await admitSale(admission, parts.offersOf(capability), saleRequestOf(meta));
    } catch (error) {
      if (error instanceof TollgateError) return errorResult(error);
      throw error;
    }
  }
  return sellCall(parts, { capability, input: input.data, units: units.units }, meta, signal, caller, sale);
}

/**
 * A factory of MCP servers over the same capabilities and gate: the Streamable HTTP endpoint builds one
 * per request (stateless), stdio one per process.
 *
 * @example
 * const newServer = capabilityMcpServer({ name: "summarizer", capabilities, gate: mcpPaymentGate(gate),
 *   pathOf: (c) => `/${c.name}`, pricing: (c) => listed[c.name] });
 * await newServer().connect(new StdioServerTransport());
 */
export function capabilityMcpServer(options: CapabilityMcpServerOptions): (caller?: McpCaller) => Server {
  const entries = toolEntries(options);
  const parts: McpServerParts = {
    options,
    entries,
    tools: [...entries.values()].map((entry) => entry.tool),
    offersOf: offerBooks(options),
  };
  return (caller) => {
    const server = new Server(
      { name: options.name, version: options.version ?? "1.0.0" },
      {
        capabilities: { tools: {} },
        ...(options.description === undefined ? {} : { instructions: options.description }),
      },
    );
    server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: parts.tools }));
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) =>
      callTool(
        parts,
        request.params.name,
        request.params.arguments,
        request.params._meta,
        extra.signal,
        caller,
      ),
    );
    return server;
  };
}

/** Runs a handler: its output as JSON text and structured content, or its failure as a tool error. */
async function runHandler(
  capability: Capability,
  input: Record<string, unknown>,
  context: CapabilityContext,
  logger: CapabilityMcpServerOptions["logger"],
): Promise<McpToolResult> {
  try {
    const output: unknown = await capability.handler(input, context);
    const text = JSON.stringify(output ?? null);
    const structured =
      typeof output === "object" && output !== null && !Array.isArray(output)
        ? (output as Record<string, unknown>)
        : undefined;
    return {
      content: [{ type: "text", text }],
      ...(structured === undefined ? {} : { structuredContent: structured }),
    };
  } catch (error) {
    if (!(error instanceof TollgateError) || error.code === "Internal") {
      logger?.error({ err: error, capability: capability.name }, "capability failed");
    }
    return errorResult(
      error instanceof TollgateError ? error : new TollgateError("Internal", "the capability failed"),
    );
  }
}

/** A `TollgateError` as a tool error: its §2.6 body, and its HTTP status under `_meta`. */
function errorResult(error: TollgateError): McpToolResult {
  const body = error.toBody();
  return {
    isError: true,
    structuredContent: body,
    content: [{ type: "text", text: JSON.stringify(body) }],
    _meta: {
      [McpMetaKey.TollgateError]: {
        status: error.status,
        ...(error.retryAfter === undefined ? {} : { retryAfter: error.retryAfter }),
      },
    },
  };
}

/**
 * A call's payment as sale admission reads it (untrusted `_meta`: a malformed one counts as unpaid,
 * and the gate refuses it).
 */
function saleRequestOf(meta: unknown): SaleRequest {
  const parsed = McpPaymentMetaSchema.safeParse(meta ?? {});
  if (!parsed.success) return { paid: false };
  const proof = parsed.data[McpMetaKey.TollgatePayment];
  const paid =
    proof !== undefined ||
    parsed.data[McpMetaKey.X402Payment] !== undefined ||
    parsed.data[McpMetaKey.TollgateSubscription] !== undefined;
  return { paid, memo: memoOfProof(proof) };
}

/** How the gate answered a call it did not let through: payment required names the memos offered. */
function answerOf(result: McpToolResult): Parameters<AdmittedSale["answered"]>[0] {
  const required = result._meta?.[McpMetaKey.TollgatePaymentRequired];
  if (required !== undefined) return { status: 402, offered: memosOfPaymentRequired(required) };
  return { status: statusOf(result) };
}

function statusOf(result: McpToolResult): number {
  const meta = result._meta?.[McpMetaKey.TollgateError] as { status?: unknown } | undefined;
  return typeof meta?.status === "number" ? meta.status : 500;
}
