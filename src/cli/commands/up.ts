/**
 * `tollgate up`: the whole local stack in this one process — the devnet, the facilitator, the market
 * and the dashboard — on the default ports, its state kept in one data directory so that the next
 * `tollgate up` comes back with the same chain, records and keys. Ctrl-C stops it all.
 */
import { randomBytes } from "node:crypto";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { DEFAULT_PORTS } from "../defaultPorts.ts";
import { DevnetRunningError, startUpDevnet, type UpDevnet } from "../upDevnet.ts";
import { startUpFacilitator } from "../upFacilitator.ts";
import { ensureProviderKey } from "../upProviderKey.ts";
import { startDashboardPointer, startUpMarket, type UpService, waitUntilAnswers } from "../upServices.ts";
import { formatUpSummary } from "../upSummary.ts";

export const summary = "the whole local stack in one process: devnet, facilitator, market and dashboard";

const usage = `usage: tollgate up [--data-dir .tollgate] [--port-offset 0]
  Starts, in this process, a devnet (anvil on :${DEFAULT_PORTS.devnet}, Tollgate and USDC deployed, 10 funded
  accounts), the facilitator (:${DEFAULT_PORTS.facilitator}), the market (:${DEFAULT_PORTS.market}) and the dashboard
  (<facilitator>/dashboard, providers' and agent operator's views; :${DEFAULT_PORTS.dashboard} points to it), then
  prints every address, the dev accounts' roles, the provider's API key, the dashboard's sign-in token and
  the environment other terminals need. Ctrl-C stops everything, the last started first.
  Everything is kept in the data directory (--data-dir, else TOLLGATE_DIR, else .tollgate): the chain
  (devnet-state.json), the facilitator's and the market's PGlite stores, the proof and webhook keys and the
  provider key; the next \`tollgate up\` there comes back with the same contracts, balances, keys and records.
options: --port-offset N adds N to every port (a second stack beside the first)
environment: LOG_LEVEL (default warn) TOLLGATE_DASHBOARD_TOKEN (at least 24 characters; default: a fresh
  random token each start) and the facilitator's tuning variables (docs/facilitator.md)`;

const UpEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("warn"),
  TOLLGATE_DASHBOARD_TOKEN: z.string().min(24).max(200).optional(),
});

/**
 * Variables that would point the facilitator or the market at another chain or database than the data
 * directory's: `tollgate up` keeps everything there, so they are left out of what it reads.
 */
const ELSEWHERE = [
  "DATABASE_URL",
  "TOLLGATE_DEPLOYMENT",
  "TOLLGATE_GAS_KEY",
  "TOLLGATE_PROOF_KEYS",
  "TOLLGATE_TOKEN",
  "TOLLGATE_TOKEN_NAME",
  "TOLLGATE_TOKEN_VERSION",
  "TOLLGATE_BATCH_SETTLER",
  "TOLLGATE_SUBSCRIPTION_MANAGER",
  "TOLLGATE_CHANNELS",
] as const;

type Ports = { [K in keyof typeof DEFAULT_PORTS]: number };

/** What one `tollgate up` started, in order; stopped the other way round. */
type Stack = { stops: (() => Promise<void>)[] };

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      "data-dir": { type: "string" },
      "port-offset": { type: "string", default: "0" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    console.log(usage);
    return 0;
  }
  const offset = Number(values["port-offset"]);
  if (positionals.length > 0 || !Number.isInteger(offset) || offset < 0 || offset > 60_000) {
    console.error(`tollgate up: takes no arguments; --port-offset is a whole number 0-60000\n${usage}`);
    return 2;
  }
  const env = UpEnvSchema.parse(process.env);
  const dir = resolve(values["data-dir"] ?? env.TOLLGATE_DIR);
  const ports = Object.fromEntries(
    Object.entries(DEFAULT_PORTS).map(([name, port]) => [name, port + offset]),
  ) as Ports;
  return runStack({ dir, ports, env, fetch: globalThis.fetch });
}

/** Starts the stack, prints the summary, waits for Ctrl-C or SIGTERM, stops it; the exit code. */
async function runStack(options: {
  dir: string;
  ports: Ports;
  env: z.infer<typeof UpEnvSchema>;
  fetch: FetchFn;
}): Promise<number> {
  const stack: Stack = { stops: [] };
  const stopRequested = untilSignal();
  const started = Date.now();
  const starting = startStack(stack, options);
  try {
    const summaryLines = await Promise.race([starting, stopRequested.then(() => undefined)]);
    if (summaryLines === undefined) {
      // Interrupted while starting: let the part being started finish, so that it is stopped too.
      await starting.catch(() => {});
    } else {
      console.log(summaryLines.join("\n"));
      console.log(`\nReady in ${((Date.now() - started) / 1000).toFixed(1)} s. Ctrl-C stops everything.`);
      await stopRequested;
    }
  } catch (error) {
    await stopAll(stack);
    stopRequested.cancel();
    if (error instanceof DevnetRunningError) {
      console.error(`tollgate up: ${error.message}`);
      return 1;
    }
    throw error;
  }
  console.log("\nstopping…");
  await stopAll(stack);
  stopRequested.cancel();
  console.log("stopped.");
  return 0;
}

/** Starts each part in turn, recording how to stop it; resolves with the summary's lines. */
async function startStack(
  stack: Stack,
  options: { dir: string; ports: Ports; env: z.infer<typeof UpEnvSchema>; fetch: FetchFn },
): Promise<string[]> {
  const { dir, ports, env, fetch } = options;
  const devnet: UpDevnet = await startUpDevnet(dir, ports.devnet);
  stack.stops.push(() => devnet.stop());
  const serviceEnv = servicesEnvironment(dir, ports, devnet, env.LOG_LEVEL);
  const dashboardToken = env.TOLLGATE_DASHBOARD_TOKEN ?? base64UrlEncode(randomBytes(24));
  // Side by side: each opens and migrates a PGlite store of its own, the longest part of a first start.
  const [facilitator, market] = await startTogether(stack, [
    startUpFacilitator(serviceEnv, dashboardToken),
    startUpMarket(dir, ports.market, serviceEnv, fetch),
  ]);
  const dashboardUrl = `${facilitator.url}/dashboard`;
  const pointer = await startDashboardPointer(ports.dashboard, dashboardUrl);
  stack.stops.push(() => pointer.stop());
  const provider = await ensureProviderKey(dir, facilitator.url, devnet.description, fetch);
  await Promise.all([
    waitUntilAnswers(`${facilitator.url}/supported`, fetch),
    waitUntilAnswers(`${market.url}/healthz`, fetch),
    waitUntilAnswers(`${dashboardUrl}/login`, fetch),
  ]);
  return formatUpSummary({
    dir,
    devnet: devnet.description,
    restored: devnet.restored,
    facilitatorUrl: facilitator.url,
    marketUrl: market.url,
    dashboardUrl,
    dashboardPointerUrl: pointer.url,
    dashboardToken,
    provider,
  });
}

/**
 * The environment the facilitator and the market read: the caller's, without what would point them
 * elsewhere, with the data directory, the ports, and loopback webhook targets allowed (the receivers of
 * a local stack run on this machine).
 */
function servicesEnvironment(
  dir: string,
  ports: Ports,
  devnet: UpDevnet,
  logLevel: string,
): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of ELSEWHERE) delete env[name];
  return {
    ...env,
    TOLLGATE_DIR: dir,
    TOLLGATE_RPC_URL: devnet.description.rpcUrl,
    TOLLGATE_NETWORK: devnet.description.network,
    TOLLGATE_PORT: String(ports.facilitator),
    TOLLGATE_HOST: "127.0.0.1",
    TOLLGATE_WEBHOOK_ALLOW_TARGETS: env.TOLLGATE_WEBHOOK_ALLOW_TARGETS ?? "127.0.0.0/8,::1",
    LOG_LEVEL: logLevel,
  };
}

/** Waits for both starts; records each that started, so it is stopped even when the other failed. */
async function startTogether<A extends UpService, B extends UpService>(
  stack: Stack,
  starts: [Promise<A>, Promise<B>],
): Promise<[A, B]> {
  const [a, b] = await Promise.allSettled(starts);
  for (const started of [a, b]) {
    if (started.status === "fulfilled") stack.stops.push(() => started.value.stop());
  }
  if (a.status === "rejected") throw a.reason;
  if (b.status === "rejected") throw b.reason;
  return [a.value, b.value];
}

/** Stops what started, the last first; a part that fails to stop does not keep the others running. */
async function stopAll(stack: Stack): Promise<void> {
  for (const stop of stack.stops.splice(0).reverse()) {
    try {
      await stop();
    } catch (error) {
      console.error(`tollgate up: while stopping: ${(error as Error).message}`);
    }
  }
}

/**
 * Resolves at the first SIGINT or SIGTERM. The listeners stay until `cancel()`, after everything is
 * stopped: a second Ctrl-C during the stop must not end the process before the chain is saved.
 */
function untilSignal(): Promise<void> & { cancel(): void } {
  let stop = () => {};
  const promise = new Promise<void>((done) => {
    stop = () => done();
  });
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  return Object.assign(promise, {
    cancel: () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    },
  });
}
