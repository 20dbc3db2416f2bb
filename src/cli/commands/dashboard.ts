/**
 * `tollgate dashboard`: the agent operator's dashboard over this machine's agent store, on a loopback
 * address, until Ctrl-C (docs/dashboard.md). Providers' views are served by the facilitator itself at
 * `<facilitator>/dashboard`; this command prints that address too when it knows the facilitator.
 *
 * Threat model: the agent views show budgets, spends and subscriptions of every agent in the store, so
 * the server binds loopback only and signs in with a token printed at start (or TOLLGATE_DASHBOARD_TOKEN),
 * posted in a form, never put in a URL. With PGlite the store is opened for each page view and closed
 * after it, so `tollgate run` and `tollgate budget` keep working while the dashboard is open.
 */
import { randomBytes } from "node:crypto";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Hono } from "hono";
import pino from "pino";
import { createPublicClient, defineChain } from "viem";
import { z } from "zod";
import type { AgentNextRenewal } from "../../agent/dashboard/agentDashboardPart.ts";
import { type AgentStoreAccess, agentSection } from "../../agent/dashboard/agentSection.ts";
import { getSubscription } from "../../chain/actions/subscriptions/getSubscription.ts";
import { readDevnetFile } from "../../chain/devnetFile.ts";
import { rpcTransport } from "../../chain/rpcTransport.ts";
import { RpcUrlsSchema } from "../../chain/rpcUrls.ts";
import { createDashboardApp } from "../../facilitator/dashboard/dashboardApp.ts";
import { serveApp } from "../../http/serveApp.ts";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { createStore } from "../../store/createStore.ts";
import type { Store } from "../../store/store.ts";
import { DEFAULT_PORTS } from "../defaultPorts.ts";
import { openAgentStore } from "../openAgentStore.ts";

export const summary =
  "the agent operator's web dashboard (budgets, spend by tool, subscriptions) on loopback";

const usage = `usage: tollgate dashboard [--port ${DEFAULT_PORTS.dashboard}] [--host 127.0.0.1] [--dir .tollgate] [--facilitator <url>]
  Serves the agent operator's dashboard at http://<host>:<port>/dashboard until Ctrl-C: each agent's
  budget and limits, spend over time by tool, seller and mode, subscriptions held and their next
  renewal, the policy's reasons and the latest run's spend report. Sign in with the token printed at
  start. Loopback addresses only. Providers sign in at <facilitator>/dashboard with their API key
  (served by \`tollgate facilitator\`; TOLLGATE_DASHBOARD=on|off, on by default for a devnet on loopback).
options: --port (0 picks a free one) --host (127.0.0.1, ::1 or localhost) --dir (the agent store is
         PGlite in <dir>/agents unless DATABASE_URL is set) --facilitator (printed as the provider views)
environment: DATABASE_URL TOLLGATE_DIR TOLLGATE_FACILITATOR_URL TOLLGATE_RPC_URL
  TOLLGATE_DASHBOARD_TOKEN (at least 24 characters; default: a fresh random token each start)`;

const EnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  DATABASE_URL: z.string().optional(),
  TOLLGATE_FACILITATOR_URL: z.url().optional(),
  TOLLGATE_RPC_URL: RpcUrlsSchema.optional(),
  TOLLGATE_DASHBOARD_TOKEN: z.string().min(24).max(200).optional(),
});

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

function parseDashboardArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      port: { type: "string", default: String(DEFAULT_PORTS.dashboard) },
      host: { type: "string", default: "127.0.0.1" },
      dir: { type: "string" },
      facilitator: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
}

type DashboardFlags = ReturnType<typeof parseDashboardArgs>["values"];
type DashboardEnv = z.infer<typeof EnvSchema>;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseDashboardArgs(argv);
  if (values.help === true) {
    console.log(usage);
    return 0;
  }
  if (positionals.length > 0) {
    console.error(`tollgate dashboard: takes no arguments\n${usage}`);
    return 2;
  }
  const env = EnvSchema.parse(process.env);
  const port = checkAddress(values);
  if (port === undefined) return 2;
  const dir = resolve(values.dir ?? env.TOLLGATE_DIR);
  const token = env.TOLLGATE_DASHBOARD_TOKEN ?? base64UrlEncode(randomBytes(24));
  const nextRenewal = nextRenewalReader(env, dir);
  const stores = await openDashboardStores(env, dir);
  const app = new Hono();
  app.get("/", (c) => c.redirect("/dashboard/", 302));
  app.route("/dashboard", buildDashboard(token, stores, nextRenewal));

  let server: Awaited<ReturnType<typeof serveApp>>;
  try {
    server = await serveApp(app, { port, hostname: values.host === "localhost" ? "127.0.0.1" : values.host });
  } catch (error) {
    await stores.close();
    if (error instanceof TollgateError) {
      console.error(`tollgate dashboard: ${error.message}`);
      return 1;
    }
    throw error;
  }
  printAddresses(server.url, token, values.facilitator ?? env.TOLLGATE_FACILITATOR_URL);
  await untilStopped();
  await server.close();
  await stores.close();
  return 0;
}

/** A loopback --host and a port number; the port, or undefined once the refusal is printed. */
function checkAddress(values: DashboardFlags): number | undefined {
  if (!LOOPBACK.has(values.host)) {
    console.error(
      `tollgate dashboard: --host ${values.host} is not a loopback address; the agent views are local-only (see docs/dashboard.md)`,
    );
    return undefined;
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    console.error(`tollgate dashboard: --port must be a port number, not "${values.port}"`);
    return undefined;
  }
  return port;
}

interface DashboardStores {
  agentStore: AgentStoreAccess;
  sessionStore: Store;
  /** The shared agent store (PostgreSQL), then the sessions' store. */
  close(): Promise<void>;
}

async function openDashboardStores(env: DashboardEnv, dir: string): Promise<DashboardStores> {
  // PostgreSQL: one pool for the command's life. PGlite: open for a page view, then let go.
  let shared: Store | undefined;
  if (env.DATABASE_URL !== undefined && env.DATABASE_URL !== "") {
    shared = await openAgentStore({ databaseUrl: env.DATABASE_URL, dir });
  }
  const agentStore: AgentStoreAccess = async (work) => {
    if (shared !== undefined) return work(shared);
    const store = await openAgentStore({ databaseUrl: undefined, dir, waitMs: 10_000 });
    try {
      return await work(store);
    } finally {
      await store.close();
    }
  };
  // Sessions live in memory: they end with the command.
  const sessionStore = await createStore({ dataDir: "memory://" });
  return {
    agentStore,
    sessionStore,
    close: async () => {
      await shared?.close();
      await sessionStore.close();
    },
  };
}

/** The subscriptions' next renewal read from the chain, when an RPC is known (flag or devnet file). */
function nextRenewalReader(env: DashboardEnv, dir: string): AgentNextRenewal | undefined {
  const devnet = readDevnetFile(dir);
  const rpcUrls = env.TOLLGATE_RPC_URL ?? (devnet === undefined ? undefined : [devnet.rpcUrl]);
  if (rpcUrls === undefined) return undefined;
  const chainClient = createPublicClient({
    chain: defineChain({
      id: devnet?.chainId ?? 31_337,
      name: "tollgate",
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: rpcUrls } },
    }),
    transport: rpcTransport(rpcUrls, { retryCount: 0, timeout: 5_000 }),
  });
  return async (manager, subscriptionId) => {
    const sub = await getSubscription(chainClient, {
      manager: manager as `0x${string}`,
      subscriptionId,
    });
    // Active (1) and PastDue (4) are charged at the period's end.
    return sub.status === 1 || sub.status === 4 ? Number(sub.currentPeriodEnd) : undefined;
  };
}

function buildDashboard(token: string, stores: DashboardStores, nextRenewal: AgentNextRenewal | undefined) {
  return createDashboardApp({
    sessionStore: stores.sessionStore,
    agentToken: token,
    sections: [
      agentSection({
        store: stores.agentStore,
        clock: systemClock,
        token: { decimals: 6, symbol: "USDC" },
        nextRenewal,
      }),
    ],
    clock: systemClock,
    logger: pino({ level: process.env.LOG_LEVEL ?? "warn" }),
  });
}

function printAddresses(url: string, token: string, facilitator: string | undefined): void {
  console.log(`Agent dashboard: ${url}/dashboard`);
  console.log(`  sign in with the dashboard token: ${token}`);
  if (facilitator !== undefined)
    console.log(`Provider dashboard: ${facilitator.replace(/\/$/, "")}/dashboard`);
  console.log("Ctrl-C stops it.");
}

/** Resolves at Ctrl-C or SIGTERM. */
function untilStopped(): Promise<void> {
  return new Promise<void>((done) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      done();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
}
