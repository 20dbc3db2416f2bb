/**
 * `tollgate market`: runs the market registry (sellers register signed manifests, buyers search the
 * catalog), or searches one with `tollgate market search`.
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import pino from "pino";
import { z } from "zod";
import { CommaListSchema } from "../../facilitator/commaListSchema.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { createWebhookTargetPolicy } from "../../http/webhookTargets.ts";
import { serveMarket } from "../../market/createMarket.ts";
import { pinnedSellerFetch } from "../../market/fetchSellerDocument.ts";
import { CatalogSchemeSchema, DEFAULT_MARKET_PORT, DEFAULT_MARKET_URL } from "../../market/marketApi.ts";
import { createMarketClient } from "../../market/marketClient.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { NetworkSchema } from "../../protocol/network.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { createStore } from "../../store/createStore.ts";
import { inlineNegativeValues, MONEY_NOTATION, parseMoney } from "../money.ts";

export const summary = "run the market registry [--port 4030], or `market search <words>` its catalog";

const MarketEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  TOLLGATE_MARKET_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_MARKET_PORT: z.coerce.number().int().min(0).max(65_535).optional(),
  DATABASE_URL: z.string().optional(),
  /** Non-public seller addresses the market may fetch (refresh, liveness): `127.0.0.0/8,::1` on a devnet. */
  TOLLGATE_MARKET_ALLOW_TARGETS: CommaListSchema.optional(),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
});

export type CommandOutput = { log(line: string): void; error(line: string): void };

export type MarketCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
  clock: Clock;
  /** Resolves when the service should stop (default: SIGINT or SIGTERM). */
  untilStopped?: () => Promise<void>;
};

const usage = `usage: tollgate market [serve] [--port 4030] [--host 127.0.0.1] [--dir .tollgate] [--no-refresh]
                             [--allow-targets 127.0.0.0/8,::1]
         run the market registry; its database is DATABASE_URL, or PGlite in <dir>/market.
         It reads sellers' /.well-known/tollgate.json (refresh, liveness checks every few minutes) at
         public addresses only, unless --allow-targets names others (default with a loopback --host:
         127.0.0.0/8,::1, for sellers on this machine); --no-refresh: never fetch sellers' URLs
       tollgate market search [words…] [--max-price 0.05] [--scheme one-time|subscription|metered]
                             [--network eip155:8453] [--limit 20] [--market ${DEFAULT_MARKET_URL}] [--json]
         search the catalog; --max-price is the most a call may cost, above zero
${MONEY_NOTATION}
environment: DATABASE_URL TOLLGATE_DIR TOLLGATE_MARKET_PORT TOLLGATE_MARKET_URL TOLLGATE_MARKET_ALLOW_TARGETS
             LOG_LEVEL`;

function parseMarketArgs(argv: string[]) {
  return parseArgs({
    args: inlineNegativeValues(argv, ["--max-price"]),
    allowPositionals: true,
    options: {
      port: { type: "string" },
      host: { type: "string", default: "127.0.0.1" },
      dir: { type: "string" },
      "no-refresh": { type: "boolean", default: false },
      "allow-targets": { type: "string" },
      market: { type: "string" },
      "max-price": { type: "string" },
      scheme: { type: "string" },
      network: { type: "string" },
      limit: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

type MarketValues = ReturnType<typeof parseMarketArgs>["values"];
type MarketEnv = z.infer<typeof MarketEnvSchema>;

/** Runs `tollgate market …`; returns the exit code. */
export async function marketCommand(argv: string[], deps: MarketCommandDeps): Promise<number> {
  const { values, positionals } = parseMarketArgs(argv);
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  const env = parseWire(MarketEnvSchema, deps.env, { what: "environment" });
  const [command = "serve", ...words] = positionals;
  if (command === "search") return searchMarket(values, env, deps, words);
  if (command !== "serve") {
    deps.out.error(usage);
    return 2;
  }
  return serveMarketCommand(values, env, deps);
}

/** `tollgate market search [words…]`. */
async function searchMarket(
  values: MarketValues,
  env: MarketEnv,
  deps: MarketCommandDeps,
  words: string[],
): Promise<number> {
  const market = createMarketClient({
    url: values.market ?? env.TOLLGATE_MARKET_URL ?? DEFAULT_MARKET_URL,
    fetch: deps.fetch,
  });
  const { results } = await market.search({
    q: words.join(" ") || undefined,
    // Sent as a bigint, so the market receives smallest units whatever notation was typed.
    maxPrice: values["max-price"] === undefined ? undefined : parseMoney(values["max-price"], "--max-price"),
    scheme:
      values.scheme === undefined
        ? undefined
        : parseWire(CatalogSchemeSchema, values.scheme, { what: "--scheme" }),
    network:
      values.network === undefined
        ? undefined
        : parseWire(NetworkSchema, values.network, { what: "--network" }),
    limit: values.limit === undefined ? undefined : Number(values.limit),
  });
  if (values.json) {
    deps.out.log(JSON.stringify(results, null, 2));
    return 0;
  }
  if (results.length === 0) deps.out.log("no capabilities found");
  for (const entry of results) {
    const schemes = [...new Set(entry.capability.pricing.map((p) => p.type))].join(", ");
    deps.out.log(
      `${entry.capability.name}  ${formatUnitsExact(BigInt(entry.price))} USDC/call (${schemes})  ${entry.capability.method} ${entry.url}`,
    );
    deps.out.log(
      `  ${entry.seller.name} ${entry.seller.address} on ${entry.network}: ${entry.capability.description}`,
    );
  }
  return 0;
}

/** `tollgate market [serve]`: runs the market until stopped. */
async function serveMarketCommand(
  values: MarketValues,
  env: MarketEnv,
  deps: MarketCommandDeps,
): Promise<number> {
  const port =
    values.port === undefined ? (env.TOLLGATE_MARKET_PORT ?? DEFAULT_MARKET_PORT) : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    deps.out.error(`tollgate market: --port must be 0-65535, got ${values.port}`);
    return 2;
  }
  // A market that listens on loopback only is a local one, whose sellers run on this machine too: it
  // may fetch loopback sellers unless told otherwise. A market others can reach fetches public ones.
  const localDefault = isLoopbackHost(values.host) ? ["127.0.0.0/8", "::1"] : [];
  const allowTargets =
    values["allow-targets"] === undefined
      ? (env.TOLLGATE_MARKET_ALLOW_TARGETS ?? localDefault)
      : CommaListSchema.parse(values["allow-targets"]);
  try {
    createWebhookTargetPolicy({ allowTargets });
  } catch (error) {
    deps.out.error(`tollgate market: --allow-targets: ${(error as Error).message}`);
    return 2;
  }
  const dir = resolve(values.dir ?? env.TOLLGATE_DIR);
  const logger = pino({ name: "market", level: env.LOG_LEVEL });
  // Not the facilitator's PGlite directory: one PGlite directory can be open in one process only.
  const store = await createStore({ databaseUrl: env.DATABASE_URL, dataDir: join(dir, "market"), logger });
  const server = await serveMarket({
    store,
    clock: deps.clock,
    logger,
    // Connects to the address the target check approved, never to a second DNS answer.
    fetch: values["no-refresh"] ? undefined : pinnedSellerFetch,
    sellerTargets: { allowTargets },
    port,
    hostname: values.host,
  }).catch(async (error: unknown) => {
    // Nothing listens (say, the port is taken): release the database so the command can end.
    await store.close();
    throw error;
  });
  logger.info({ url: server.url, store: store.kind }, "market listening");
  // For people, on stderr: stdout carries the JSON log lines only, so a log collector can parse it.
  deps.out.error(
    `market listening on ${server.url} (${store.kind === "postgres" ? "PostgreSQL" : `PGlite in ${join(dir, "market")}`})`,
  );
  await (deps.untilStopped ?? untilSignal)();
  await server.close();
  await store.close();
  return 0;
}

function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function untilSignal(): Promise<void> {
  return new Promise((done) => {
    process.once("SIGINT", () => done());
    process.once("SIGTERM", () => done());
  });
}

export function run(argv: string[]): Promise<number> {
  return marketCommand(argv, { env: process.env, out: console, fetch: globalThis.fetch, clock: systemClock });
}
