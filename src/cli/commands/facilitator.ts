/**
 * `tollgate facilitator`: runs the facilitator service until interrupted.
 * Configuration comes from the environment (see docs/facilitator.md); flags override the settings that are
 * not secrets.
 */
import { parseArgs } from "node:util";
import { setFlagsFromString } from "node:v8";
import { createPublicClient, createWalletClient, defineChain, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { readDevnetFile } from "../../chain/devnetFile.ts";
import { getNetworkConfig } from "../../chain/networks.ts";
import { rpcTransport } from "../../chain/rpcTransport.ts";
import { privateKeyAccount } from "../../chain/signers/privateKeyAccount.ts";
import {
  type CreateFacilitatorOptions,
  createFacilitator,
  serveApp,
} from "../../facilitator/createFacilitator.ts";
import { createLogger } from "../../facilitator/createLogger.ts";
import { loadFacilitatorConfig, resolveTokenDomain } from "../../facilitator/facilitatorConfig.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { chainIdOf } from "../../protocol/network.ts";
import { createStore } from "../../store/createStore.ts";
import { facilitatorStatus } from "../facilitatorStatus.ts";

export const summary = "run the facilitator service (settlement, proofs, subscriptions, webhooks)";

/**
 * Flags and the environment variable each one overrides. The gas key and the proof keys have no flag:
 * a secret on the command line is visible to every user of the machine (`ps`), so they come from the
 * environment only.
 */
const flagVariables = {
  "rpc-url": "TOLLGATE_RPC_URL",
  network: "TOLLGATE_NETWORK",
  confirmations: "TOLLGATE_CONFIRMATIONS",
  "database-url": "DATABASE_URL",
  dir: "TOLLGATE_DIR",
  deployment: "TOLLGATE_DEPLOYMENT",
  port: "TOLLGATE_PORT",
  host: "TOLLGATE_HOST",
  "webhook-allow-targets": "TOLLGATE_WEBHOOK_ALLOW_TARGETS",
  "min-amount": "TOLLGATE_MIN_AMOUNT",
  "max-fee-share": "TOLLGATE_MAX_FEE_SHARE",
  "eth-price-usd": "TOLLGATE_ETH_PRICE_USD",
  dashboard: "TOLLGATE_DASHBOARD",
  "max-fee-gwei": "TOLLGATE_MAX_FEE_GWEI",
  "gas-runway-warn-hours": "TOLLGATE_GAS_RUNWAY_WARN_HOURS",
} as const;

/** The environment the configuration is parsed from: `environment` with the given flags applied. */
export function facilitatorEnvironment(
  argv: string[],
  environment: Record<string, string | undefined>,
): { help: boolean; env: Record<string, string | undefined> } {
  const { values } = parseArgs({
    args: argv,
    options: {
      ...Object.fromEntries(Object.keys(flagVariables).map((flag) => [flag, { type: "string" as const }])),
      help: { type: "boolean", short: "h" },
    },
  });
  const env = { ...environment };
  for (const [flag, variable] of Object.entries(flagVariables)) {
    const value = (values as Record<string, unknown>)[flag];
    if (typeof value === "string") env[variable] = value;
  }
  return { help: values.help === true, env };
}

const serveUsage =
  "usage: tollgate facilitator [--port 4020] [--host 127.0.0.1] [--rpc-url URL[,URL…]] [--network eip155:N]\n" +
  "         [--confirmations N] [--database-url postgres://…] [--dir .tollgate] [--min-amount N]\n" +
  "         [--deployment <dir>/deployment-<chain id>.json]\n" +
  "       tollgate facilitator status [--url URL] (a running facilitator's checks: --help)\n" +
  "environment: TOLLGATE_RPC_URL TOLLGATE_NETWORK TOLLGATE_GAS_KEY TOLLGATE_PROOF_KEYS TOLLGATE_CONFIRMATIONS\n" +
  "  DATABASE_URL LOG_LEVEL\n" +
  "  TOLLGATE_CONFIRMATIONS, --confirmations (blocks that must hold a settlement before its proof is\n" +
  "  issued; default 2 on Base, 1 on Base Sepolia and a devnet: docs/going-live.md)\n" +
  "  TOLLGATE_RPC_URL, --rpc-url: one URL or several, comma-separated, in order of preference; a provider\n" +
  "  answering 429/5xx or timing out is passed over for 30 s, one lagging behind the others is not read\n" +
  '  from (docs/going-live.md, "RPC providers"); URLs are printed with their keys masked\n' +
  "  TOLLGATE_RPC_BATCH_SIZE (most calls per JSON-RPC batch; default 100, 1 never batches)\n" +
  "  TOLLGATE_RPC_LOGS_RANGE (most blocks per eth_getLogs call; default 2000, halved when refused)\n" +
  "  TOLLGATE_DEPLOYMENT, --deployment (the file `tollgate deploy` wrote; default\n" +
  "  <dir>/deployment-<chain id>.json for TOLLGATE_NETWORK; it gives the token, its EIP-712 domain and the\n" +
  "  contracts: docs/going-live.md)\n" +
  "  TOLLGATE_TOKEN TOLLGATE_TOKEN_NAME TOLLGATE_TOKEN_VERSION TOLLGATE_BATCH_SETTLER\n" +
  "  TOLLGATE_SUBSCRIPTION_MANAGER TOLLGATE_CHANNELS (override the deployment file or devnet.json)\n" +
  '  TOLLGATE_MIN_AMOUNT, --min-amount (USDC "0.01" or "10000units"; default 0.01 on Base, 1units devnet)\n' +
  "  TOLLGATE_RATE_LIMIT_CLIENT TOLLGATE_RATE_LIMIT_PAYER TOLLGATE_RATE_LIMIT_PROVIDER (<burst>:<per second>\n" +
  "  or off; default 120:20, 60:10, 600:100)\n" +
  "  TOLLGATE_TRUSTED_PROXIES (reverse proxies whose X-Forwarded-For is believed; default none)\n" +
  "  TOLLGATE_METRICS_TOKEN (unset: /metrics answers loopback peers only)\n" +
  "  TOLLGATE_MAX_FEE_GWEI, --max-fee-gwei (the most a transaction offers per gas, in gwei, e.g. 0.5;\n" +
  "  above it transactions wait for the fee to fall, nothing is dropped; default no maximum)\n" +
  "  TOLLGATE_MAX_FEE_SHARE, --max-fee-share (refuse a payment whose settlement would cost more than this\n" +
  "  share of its value at the network's current fee: the minimum rises with the fee; default 0.5, or off)\n" +
  "  TOLLGATE_ETH_PRICE_USD, --eth-price-usd (ETH in USD for that comparison; default 5000; on a devnet\n" +
  "  the share applies only when this is set)\n" +
  "  TOLLGATE_GAS_RUNWAY_WARN_HOURS, --gas-runway-warn-hours (warn when the gas key lasts fewer hours at its\n" +
  "  recent spending; default 24)\n" +
  "  TOLLGATE_WEBHOOK_KEYS (keys sealing webhook secrets; default: generated into <dir>/webhook-secret-key)\n" +
  "  TOLLGATE_WEBHOOK_ALLOW_TARGETS, --webhook-allow-targets (non-public webhook targets allowed, e.g.\n" +
  "  127.0.0.0/8,::1 for local development; default none)\n" +
  "  TOLLGATE_DASHBOARD, --dashboard on|off (the web dashboard at /dashboard; default on for a devnet\n" +
  "  on a loopback address, off otherwise: see docs/dashboard.md)\n" +
  "  (flags override the environment; the keys are read from the environment only;\n" +
  "  defaults come from the deployment file, or from .tollgate/devnet.json after `tollgate devnet up`)";

export async function run(argv: string[]): Promise<number> {
  if (argv[0] === "status") return runStatus(argv.slice(1));
  const { help, env } = facilitatorEnvironment(argv, process.env);
  if (help) {
    console.log(serveUsage);
    return 0;
  }
  const config = loadFacilitatorConfig(env);
  // A token whose EIP-712 domain the configuration does not say (not the network's USDC, not the
  // devnet's) has it read from the chain before anything starts.
  const token = await resolveTokenDomain(
    config.token,
    createPublicClient({ transport: rpcTransport(config.rpcUrls) }),
  );
  if (config.databaseUrl === undefined) keepPgliteOnBaselineCode();
  const logger = createLogger({ level: config.logLevel, name: "facilitator" });
  const store = await createStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, logger });
  const facilitator = buildFacilitator(config, { store, token, logger, dashboard: env.TOLLGATE_DASHBOARD });
  let server: Awaited<ReturnType<typeof serveApp>>;
  try {
    await facilitator.start();
    server = await serveApp(facilitator.app, { port: config.port, hostname: config.host });
  } catch (error) {
    // Nothing listens (say, the port is taken): stop the workers and release the database.
    await facilitator.stop();
    await store.close();
    throw error;
  }
  logger.info(
    {
      url: server.url,
      network: config.network,
      gas: privateKeyToAccount(config.gasKey).address,
      kid: config.proofKeys[0]?.kid,
    },
    "facilitator listening",
  );
  // For people, on stderr: stdout carries the JSON log lines only, so a log collector can parse it.
  console.error(`facilitator listening on ${server.url} (${config.network})`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await server.close();
  await facilitator.stop();
  await store.close();
  return 0;
}

/** The facilitator as configured, over the opened store and the token with its EIP-712 domain. */
function buildFacilitator(
  config: ReturnType<typeof loadFacilitatorConfig>,
  parts: {
    store: Awaited<ReturnType<typeof createStore>>;
    token: Awaited<ReturnType<typeof resolveTokenDomain>>;
    logger: ReturnType<typeof createLogger>;
    dashboard: string | undefined;
  },
) {
  const { store, token, logger } = parts;
  return createFacilitator({
    ...facilitatorSettings(config),
    store,
    tokens: [token],
    logger,
    dashboard: dashboardOptions(parts.dashboard, config),
  });
}

/** What `createFacilitator` takes from the facilitator's configuration (`tollgate up` builds on it too). */
export function facilitatorSettings(config: ReturnType<typeof loadFacilitatorConfig>) {
  return {
    rpcUrl: config.rpcUrls,
    rpcBatch: { maxBatchSize: config.rpcBatchSize },
    network: config.network,
    gasAccount: privateKeyAccount(config.gasKey),
    proofKeys: config.proofKeys,
    batchSettler: config.batchSettler,
    subscriptionManager: config.subscriptionManager,
    channels: config.channels,
    confirmations: config.confirmations,
    logsRange: config.logsRange,
    rateLimits: config.rateLimits,
    settlementFee: config.settlementFee,
    webhooks: { secretKeys: config.webhooks.secretKeys, allowTargets: config.webhooks.allowTargets },
    metricsAccess: { token: config.metricsToken },
    outbox: {
      ...(config.outboxStuckAfterMs === undefined ? {} : { stuckAfterMs: config.outboxStuckAfterMs }),
      maxFeePerGas: config.maxFeePerGas,
    },
    gasRunway: { warnBelowSeconds: config.gasRunwayWarnSeconds },
  };
}

/**
 * `tollgate facilitator status [--url URL]`: a running facilitator's `/healthz` for a person (exit 1
 * when degraded or unreachable). The metrics token comes from the environment only, like the keys.
 */
async function runStatus(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { url: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help === true) {
    console.log(
      "usage: tollgate facilitator status [--url http://127.0.0.1:4020]\n" +
        "  prints the facilitator's checks (chain, store, token, fees, gas); with TOLLGATE_METRICS_TOKEN set,\n" +
        "  or from the facilitator's own host, also the gas key's balance and runway and the fees waiting.\n" +
        "  Exit 0 when ok, 1 when degraded or unreachable. Default URL: TOLLGATE_HOST and TOLLGATE_PORT.",
    );
    return 0;
  }
  const host = process.env.TOLLGATE_HOST ?? "127.0.0.1";
  const url =
    values.url ?? `http://${host.includes(":") ? `[${host}]` : host}:${process.env.TOLLGATE_PORT ?? "4020"}`;
  const token = process.env.TOLLGATE_METRICS_TOKEN;
  const status = await facilitatorStatus({ url, token: token === "" ? undefined : token, fetch });
  console.log(status.text);
  return status.ok ? 0 : 1;
}

/**
 * Runs PGlite's WebAssembly on V8's baseline compiler (Liftoff) only, for the life of this process.
 * With the optimising tier on, V8 recompiles PostgreSQL's busy functions in background threads whose
 * memory (~65–75 MB of malloc arenas) stays resident after the work is done; on Liftoff alone an idle
 * facilitator measured 306–339 → 239–250 MB resident, and the CPU a store transaction costs stayed the same
 * within the noise (~0.7 ms either way, docs/facilitator.md "At rest"). Set before the first PGlite is
 * created, which compiles the module; the flag covers any WebAssembly this process compiles after it.
 */
function keepPgliteOnBaselineCode(): void {
  setFlagsFromString("--liftoff-only");
}

/**
 * The dashboard's settings, or `undefined` when it is off: `TOLLGATE_DASHBOARD=on|off`, by default on
 * only for a devnet bound to a loopback address (a public bind exposes no sign-in form unless asked).
 * On a devnet the dashboard may send plan transactions for providers whose key is a devnet dev key.
 */
export function dashboardOptions(
  setting: string | undefined,
  config: ReturnType<typeof loadFacilitatorConfig>,
): CreateFacilitatorOptions["dashboard"] {
  const devnet =
    getNetworkConfig(config.network)?.isDevnet !== false && readDevnetFile(config.dir) !== undefined;
  const loopback = ["127.0.0.1", "::1", "localhost"].includes(config.host);
  const value = (setting ?? "auto").trim().toLowerCase();
  if (!["on", "off", "auto"].includes(value)) {
    throw new TollgateError("InvalidRequest", `TOLLGATE_DASHBOARD must be on, off or auto, not "${setting}"`);
  }
  if (value === "off" || (value === "auto" && !(devnet && loopback))) return undefined;
  const file = devnet ? readDevnetFile(config.dir) : undefined;
  const keys = new Map((file?.accounts ?? []).map((a) => [a.address.toLowerCase(), a.privateKey]));
  const chain = defineChain({
    id: chainIdOf(config.network),
    name: "devnet",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [config.rpcUrl] } },
  });
  return {
    planSigner: (provider) => {
      const key = keys.get(provider.toLowerCase());
      return key === undefined
        ? undefined
        : createWalletClient({
            account: privateKeyToAccount(key as `0x${string}`),
            chain,
            transport: http(config.rpcUrl),
          });
    },
  };
}
