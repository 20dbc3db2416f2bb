/**
 * `createSpecialist` (docs/agents.md, specialists): serves each capability behind the payment gate,
 * publishes the signed manifest at `/.well-known/tollgate.json`, and registers it with a market.
 * A specialist is an ordinary Tollgate seller; it may also hold its own payer and budget and buy from
 * other specialists inside its handlers (the reseller in agents/ does).
 */
import { randomBytes } from "node:crypto";
import { serve } from "@hono/node-server";
import type { Hono } from "hono";
import type { Address, Hex } from "viem";
import { z } from "zod";
import type { PaymentGateEnv } from "../gate/honoPaymentGate.ts";
import { createMarketClient } from "../market/marketClient.ts";
import { type Clock, systemClock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { type Manifest, type Capability as ManifestCapability, signManifest } from "../protocol/manifest.ts";
import { type SpecialistMcp, specialistMcpPath } from "./mcp/specialistMcp.ts";
import {
  buildSpecialistApp,
  manifestPricing,
  pathOf,
  type SpecialistContext,
  type SpecialistState,
} from "./specialistApp.ts";
import type { CreateSpecialistOptions } from "./specialistOptions.ts";

export type { CreateSpecialistOptions, SpecialistChannels, SpecialistPlan } from "./specialistOptions.ts";

export type Specialist = {
  readonly name: string;
  readonly payTo: Address;
  /** Listens, builds and signs the manifest, and registers with the market. */
  start(): Promise<{ url: string; manifest: Manifest }>;
  stop(): Promise<void>;
  /** Sends metered usage recorded by the gate to the facilitator now; resolves with the records sent. */
  flushUsage(): Promise<number>;
  readonly url: string | undefined;
  readonly manifest: Manifest | undefined;
  /** Serves the capabilities over an MCP transport (e.g. stdio) until it closes; after `start()`. */
  serveMcp(transport: Parameters<SpecialistMcp["connect"]>[0]): Promise<void>;
};

/** Refuses, at construction rather than at the first buyer, a name used twice or a capability priced by a scheme the specialist cannot sell under (e.g. a subscription without its plan). */
function checkCapabilities(options: CreateSpecialistOptions): void {
  const names = new Set<string>();
  for (const c of options.capabilities) {
    if (names.has(c.name))
      throw new TollgateError("InvalidRequest", `capability name ${c.name} is used twice`);
    names.add(c.name);
    manifestPricing(c, options.plans?.[c.name], options.channels);
  }
}

/** Listens on `host` (port 0: any), serving through `fetch`; resolves with the port bound. */
function listen(
  state: SpecialistState,
  host: string,
  port: number,
  fetch: (request: Request) => Response | Promise<Response>,
): Promise<{ port: number }> {
  return new Promise<{ port: number }>((resolve, reject) => {
    const server = serve({ fetch, port, hostname: host }, (info) => resolve(info));
    state.server = server;
    server.once("error", reject);
  });
}

/**
 * Waits for the gate's ready(): a price under the facilitator's minimum, or a plan that is not this
 * seller's, is refused at start rather than at the first buyer; on refusal closes the gate and the server.
 */
async function gateReady(state: SpecialistState): Promise<void> {
  try {
    await state.gate?.ready();
  } catch (error) {
    await state.gate?.close();
    state.server?.close();
    state.server = undefined;
    state.url = undefined;
    throw error;
  }
}

/** The unsigned manifest of a specialist listening at `url`. */
function specialistManifest(
  options: CreateSpecialistOptions,
  url: string,
  mcpPath: string | undefined,
  clock: Clock,
): Manifest {
  const capabilities: ManifestCapability[] = options.capabilities.map((c) => ({
    name: c.name,
    description: c.description,
    method: "POST",
    path: pathOf(c),
    input: z.toJSONSchema(c.input, {
      io: "input",
      unrepresentable: "any",
    }) as ManifestCapability["input"],
    output: z.toJSONSchema(c.output, { unrepresentable: "any" }) as ManifestCapability["output"],
    pricing: manifestPricing(c, options.plans?.[c.name], options.channels),
  }));
  return {
    version: "1",
    name: options.name,
    description: options.description ?? options.name,
    seller: { payTo: options.account.address, name: options.name },
    baseUrl: url,
    facilitator: options.facilitator,
    network: options.network,
    token: options.token,
    capabilities,
    ...(mcpPath === undefined ? {} : { mcp: { url: `${url}${mcpPath}` } }),
    issuedAt: unixSeconds(clock),
  };
}

/** Registers the signed manifest with the specialist's market, if it has one. */
async function registerWithMarket(
  context: SpecialistContext,
  signed: { manifest: Manifest; signature: Hex },
): Promise<void> {
  const { options } = context;
  if (options.market === undefined) return;
  const market =
    typeof options.market === "string"
      ? createMarketClient({ url: options.market, fetch: context.fetch })
      : options.market;
  await market.register(signed);
  options.logger?.info({ specialist: options.name, market: market.url }, "registered with the market");
}

/**
 * Listens, builds the app for the origin bound (the gate binds sub-auth tokens to the public origin,
 * which is only known once listening), checks the gate, then signs, publishes and registers the manifest.
 */
async function startSpecialist(
  context: SpecialistContext,
  state: SpecialistState,
  mcpPath: string | undefined,
): Promise<{ url: string; manifest: Manifest }> {
  const { options } = context;
  if (state.url !== undefined && state.manifest !== undefined)
    return { url: state.url, manifest: state.manifest };
  const host = options.host ?? "127.0.0.1";
  let app: Hono<PaymentGateEnv> | undefined;
  const listening = await listen(state, host, options.port ?? 0, (request: Request) =>
    app === undefined ? new Response("starting", { status: 503 }) : app.fetch(request),
  );
  const url = `http://${host}:${listening.port}`;
  state.url = url;
  app = buildSpecialistApp(context, state, url);
  await gateReady(state);
  const manifest = specialistManifest(options, url, mcpPath, context.clock);
  state.manifest = manifest;
  const signed = (await signManifest(options.account, manifest)) as { manifest: Manifest; signature: Hex };
  state.signedManifest = signed;
  await registerWithMarket(context, signed);
  return { url, manifest };
}

/** Closes the gate, then the server with its open connections. */
async function stopSpecialist(state: SpecialistState): Promise<void> {
  await state.gate?.close();
  state.gate = undefined;
  const s = state.server;
  state.server = undefined;
  if (s === undefined) return;
  await new Promise<void>((resolve) => {
    s.close(() => resolve());
    (s as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
  });
}

/**
 * @example
 * const specialist = createSpecialist({ name: "summarizer", account, capabilities: [summarize],
 *   facilitator, network: "eip155:31337", token: usd, market: "http://127.0.0.1:4030" });
 * const { url } = await specialist.start();
 */
export function createSpecialist(options: CreateSpecialistOptions): Specialist {
  const context: SpecialistContext = {
    options,
    clock: options.clock ?? systemClock,
    fetch: options.fetch ?? globalThis.fetch,
    memoSecret: options.memoSecret ?? randomBytes(32),
  };
  checkCapabilities(options);
  const mcpPath = specialistMcpPath(options.mcp, options.capabilities.map(pathOf));
  const state: SpecialistState = {
    url: undefined,
    manifest: undefined,
    signedManifest: undefined,
    server: undefined,
    gate: undefined,
    mcp: undefined,
  };
  return {
    name: options.name,
    payTo: options.account.address,
    get url() {
      return state.url;
    },
    get manifest() {
      return state.manifest;
    },
    start: () => startSpecialist(context, state, mcpPath),
    flushUsage: async () => (state.gate === undefined ? 0 : state.gate.flushUsage()),
    async serveMcp(transport) {
      if (state.mcp === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          "serveMcp: start() the specialist first, with mcp not false",
        );
      }
      await state.mcp.connect(transport);
    },
    stop: () => stopSpecialist(state),
  };
}
