/**
 * The MCP side of `createSpecialist` (docs/mcp.md, "Selling"): its capabilities as MCP tools, served
 * over Streamable HTTP on the specialist's own app and over any other SDK transport (stdio), every
 * paid call checked by the specialist's own gate (same memos, replay guard, plans and metering as its
 * HTTP routes).
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { Logger } from "pino";
import { mcpPaymentGate } from "../../gate/mcp/mcpPaymentGate.ts";
import type { GatePayment, PaymentGate } from "../../gate/paymentGate.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import type { ServedSubscription } from "../../schemes/types.ts";
import type { OfferBook } from "../saleAdmission.ts";
import type { Capability, CapabilityContext } from "../tools/capability.ts";
import { capabilityMcpServer } from "./capabilityMcpServer.ts";
import { mcpHttpHandler } from "./mcpHttpHandler.ts";

/** Where and what a specialist serves over MCP; `false` serves nothing over MCP. */
export type SpecialistMcpOptions =
  | false
  | {
      /** Path of the Streamable HTTP endpoint on the specialist's app (default `/mcp`). */
      path?: string | undefined;
      /** Tools served over MCP without payment (not sold, not in the manifest). */
      freeTools?: readonly Capability[] | undefined;
    };

export const DEFAULT_MCP_PATH = "/mcp";

/** What the specialist host hands over: its gate and how it prices and names capabilities. */
export type SpecialistMcpHooks = {
  gate: PaymentGate;
  pathOf(capability: Capability): string;
  pricing(capability: Capability): ManifestPricing[];
  sale(
    payment: GatePayment | undefined,
    subscription: ServedSubscription | undefined,
  ): CapabilityContext["sale"];
  /** The open offers of an admissible capability, shared with its HTTP route (saleAdmission.ts). */
  offers?: ((capability: Capability) => OfferBook | undefined) | undefined;
};

export type SpecialistMcp = {
  /** The endpoint's path on the app. */
  readonly path: string;
  /**
   * The Streamable HTTP endpoint: a web `Request` to a `Response`. `remoteAddress`: the request's
   * socket peer as the host's server saw it (the gate's per-client limits share by it).
   */
  handle(request: Request, remoteAddress?: string): Promise<Response>;
  /** Serves the tools over `transport` (e.g. `new StdioServerTransport()`) until it closes. */
  connect(transport: Transport): Promise<Server>;
};

/**
 * The MCP endpoint path of a specialist, checked once at construction: `undefined` when MCP is off;
 * throws `InvalidRequest` when it is not a plain path or a capability is served at it.
 */
export function specialistMcpPath(
  mcp: SpecialistMcpOptions | undefined,
  capabilityPaths: readonly string[],
): string | undefined {
  if (mcp === false) return undefined;
  const path = mcp?.path ?? DEFAULT_MCP_PATH;
  if (!/^\/[A-Za-z0-9\-._~/]{0,200}$/.test(path) || path.includes("/.") || path.endsWith("/")) {
    throw new TollgateError(
      "InvalidRequest",
      `mcp.path ${JSON.stringify(path)} is not a plain path like /mcp`,
    );
  }
  if (capabilityPaths.includes(path)) {
    throw new TollgateError("InvalidRequest", `mcp.path ${path} is a capability's path: choose another`);
  }
  return path;
}

/**
 * @example
 * const mcp = specialistMcp({ name, capabilities, mcp: {} , logger }, { gate, pathOf, pricing, sale });
 * app.post(mcp.path, (c) => mcp.handle(c.req.raw));
 */
export function specialistMcp(
  options: {
    name: string;
    description?: string | undefined;
    capabilities: readonly Capability[];
    mcp?: SpecialistMcpOptions | undefined;
    logger?: Pick<Logger, "error" | "warn"> | undefined;
  },
  hooks: SpecialistMcpHooks,
): SpecialistMcp | undefined {
  const path = specialistMcpPath(options.mcp, options.capabilities.map(hooks.pathOf));
  if (path === undefined) return undefined;
  const newServer = capabilityMcpServer({
    name: options.name,
    description: options.description,
    capabilities: options.capabilities,
    freeTools: options.mcp === false ? undefined : options.mcp?.freeTools,
    gate: mcpPaymentGate(hooks.gate),
    pathOf: hooks.pathOf,
    pricing: hooks.pricing,
    sale: hooks.sale,
    offers: hooks.offers,
    logger: options.logger,
  });
  const handle = mcpHttpHandler(newServer);
  return {
    path,
    handle,
    async connect(transport) {
      const server = newServer();
      await server.connect(transport);
      return server;
    },
  };
}
