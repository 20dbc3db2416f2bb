/**
 * `tollgate market`: runs the market registry (sellers register signed manifests, buyers search the
 * catalog), or searches one with `tollgate market search`.
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import pino from "pino";
import { z } from "zod";
import type { FetchFn } from "../../client/facilitatorClient.ts";
import { serveMarket } from "../../market/createMarket.ts";
import { CatalogSchemeSchema, DEFAULT_MARKET_PORT, DEFAULT_MARKET_URL } from "../../market/marketApi.ts";
import { createMarketClient } from "../../market/marketClient.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { NetworkSchema } from "../../protocol/network.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { createStore } from "../../store/createStore.ts";

export const summary = "run the market registry [--port 4030], or `market search <words>` its catalog";

const MarketEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  TOLLGATE_MARKET_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_MARKET_PORT: z.coerce.number().int().min(0).max(65_535).optional(),
  DATABASE_URL: z.string().optional(),
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
         run the market registry; its database is DATABASE_URL, or PGlite in <dir>/market
       tollgate market search [words…] [--max-price 0.05|50000] [--scheme one-time|subscription|metered]
                             [--network eip155:8453] [--limit 20] [--market ${DEFAULT_MARKET_URL}] [--json]
         search the catalog; --max-price with a decimal point or "usdc" is USDC, digits alone are atomic units
environment: DATABASE_URL TOLLGATE_DIR TOLLGATE_MARKET_PORT TOLLGATE_MARKET_URL LOG_LEVEL`;

/** Runs `tollgate market …`; returns the exit code. */
export async function marketCommand(argv: string[], deps: MarketCommandDeps): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      port: { type: "string" },
      host: { type: "string", default: "127.0.0.1" },
      dir: { type: "string" },
      "no-refresh": { type: "boolean", default: false },
      market: { type: "string" },
      "max-price": { type: "string" },
      scheme: { type: "string" },
      network: { type: "string" },
      limit: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  const env = parseWire(MarketEnvSchema, deps.env, { what: "environment" });
  const [command = "serve", ...words] = positionals;
  if (command === "search") {
    const market = createMarketClient({
      url: values.market ?? env.TOLLGATE_MARKET_URL ?? DEFAULT_MARKET_URL,
      fetch: deps.fetch,
    });
    const { results } = await market.search({
      q: words.join(" ") || undefined,
      maxPrice: values["max-price"],
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
  if (command !== "serve") {
    deps.out.error(usage);
    return 2;
  }

  const port =
    values.port === undefined ? (env.TOLLGATE_MARKET_PORT ?? DEFAULT_MARKET_PORT) : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    deps.out.error(`tollgate market: --port must be 0-65535, got ${values.port}`);
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
    fetch: values["no-refresh"] ? undefined : deps.fetch,
    port,
    hostname: values.host,
  }).catch(async (error: unknown) => {
    // Nothing listens (say, the port is taken): release the database so the command can end.
    await store.close();
    throw error;
  });
  logger.info({ url: server.url, store: store.kind }, "market listening");
  deps.out.log(
    `market listening on ${server.url} (${store.kind === "postgres" ? "PostgreSQL" : `PGlite in ${join(dir, "market")}`})`,
  );
  await (deps.untilStopped ?? untilSignal)();
  await server.close();
  await store.close();
  return 0;
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
