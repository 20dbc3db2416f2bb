/**
 * The facilitator's configuration (docs/facilitator.md, "Configuration"): environment variables and flags, parsed once at
 * start-up with zod. On a devnet started by `tollgate devnet up`, everything but the port has a default
 * read from `.tollgate/devnet.json`, and a proof key is generated once and kept in `.tollgate/`.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { type Address, isAddressEqual, parseGwei } from "viem";
import { z } from "zod";
import { getTokenDomain } from "../chain/actions/usd/getTokenDomain.ts";
import type { ReadClient } from "../chain/clientTypes.ts";
import { type DevnetFile, readDevnetFile } from "../chain/devnetFile.ts";
import { defaultConfirmations, getNetworkConfig, type NetworkConfig } from "../chain/networks.ts";
import { RpcUrlsSchema } from "../chain/rpcUrls.ts";
import type { RateLimitOptions } from "../http/rateLimits.ts";
import { AddressSchema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { parseMoney } from "../protocol/money.ts";
import { NetworkSchema } from "../protocol/network.ts";
import { summarizeIssues } from "../protocol/parseWire.ts";
import { chainUnavailable, isChainUnreachable } from "./chainErrors.ts";
import { CommaListSchema } from "./commaListSchema.ts";
import { withDeploymentDefaults } from "./deploymentEnvironment.ts";
import type { FacilitatorToken } from "./facilitatorToken.ts";
import { generateProofKey, type ProofKey, parseProofKey } from "./proofKeys.ts";
import { loadWebhookConfig, type WebhookConfig, WebhookEnvSchema } from "./webhooks/webhookConfig.ts";

const PrivateKeySchema = z.string().regex(/^0x[0-9a-fA-F]{64}$/, {
  error: "expected a 0x-prefixed 32-byte private key",
}) as z.ZodType<`0x${string}`>;

/** A rate limit as `<requests at once>:<requests per second>` (e.g. `60:10`), or `off`. */
const RateLimitSchema = z
  .string()
  .trim()
  .regex(/^(off|[1-9]\d{0,6}:\d{1,6}(\.\d{1,6})?)$/, {
    error: "expected `<burst>:<per second>` (e.g. 60:10) or `off`",
  })
  .transform((text) => {
    if (text === "off") return false as const;
    const [capacity, refill] = text.split(":");
    return { capacity: Number(capacity), refillPerSecond: Number(refill) };
  })
  .refine((rule) => rule === false || rule.refillPerSecond > 0, { error: "the rate must be positive" });

/** What the environment may say; every field optional so devnet defaults can fill the gaps. */
export const FacilitatorEnvSchema = z.object({
  TOLLGATE_DIR: z.string().default(".tollgate"),
  /**
   * A deployment file written by `tollgate deploy`; default `<TOLLGATE_DIR>/deployment-<chain id>.json`
   * for TOLLGATE_NETWORK's chain (deploymentEnvironment.ts).
   */
  TOLLGATE_DEPLOYMENT: z.string().optional(),
  /**
   * The chain's JSON-RPC endpoint, or several, comma-separated, in order of preference: the first that
   * answers serves, a failing or lagging one is passed over (src/chain/rpcTransport.ts). Never echoed:
   * an error names an entry by its redacted URL.
   */
  TOLLGATE_RPC_URL: RpcUrlsSchema.optional(),
  /**
   * The most JSON-RPC calls sent in one batch when calls pile up (src/chain/batchingHttp.ts); 1 never
   * batches, for a node that bills or limits batches. Default 100.
   */
  TOLLGATE_RPC_BATCH_SIZE: z.coerce.number().int().min(1).max(1000).default(100),
  /**
   * The most blocks one `eth_getLogs` call spans (src/chain/actions/getLogsPaged.ts): providers cap it,
   * from a few hundred to 10 000 blocks; a refused range is halved. Default 2000.
   */
  TOLLGATE_RPC_LOGS_RANGE: z.coerce.number().int().min(1).max(1_000_000).default(2000),
  TOLLGATE_NETWORK: NetworkSchema.optional(),
  TOLLGATE_GAS_KEY: PrivateKeySchema.optional(),
  /** Comma-separated proof-key seeds (base64url or 0x-hex, 32 bytes); the first signs. */
  TOLLGATE_PROOF_KEYS: z.string().optional(),
  TOLLGATE_TOKEN: AddressSchema.optional(),
  TOLLGATE_TOKEN_NAME: z.string().optional(),
  TOLLGATE_TOKEN_VERSION: z.string().optional(),
  TOLLGATE_BATCH_SETTLER: AddressSchema.optional(),
  TOLLGATE_SUBSCRIPTION_MANAGER: AddressSchema.optional(),
  /** TollgateChannels (docs/channels.md); on a devnet, read from devnet.json. */
  TOLLGATE_CHANNELS: AddressSchema.optional(),
  /** Unset: the network's default (src/chain/networks.ts `CONFIRMATIONS`: 2 on Base, else 1). */
  TOLLGATE_CONFIRMATIONS: z.coerce.number().int().min(1).max(64).optional(),
  TOLLGATE_HOST: z.string().default("127.0.0.1"),
  TOLLGATE_PORT: z.coerce.number().int().min(0).max(65_535).default(4020),
  DATABASE_URL: z.string().optional(),
  /**
   * The smallest payment settled, in the one money notation (src/protocol/money.ts): USDC text such as
   * `0.01`, or smallest units as `10000units` (default 0.01 USDC on Base and Base Sepolia, 1unit on a
   * devnet; see abuse/minimumAmount.ts for the arithmetic). Read by `readToken`, whose refusal names
   * the variable and its flag.
   */
  TOLLGATE_MIN_AMOUNT: z.string().optional(),
  /**
   * The largest share of a payment's value its settlement may cost (abuse/settlementFeeFloor.ts): while
   * the network's fee makes settling dearer, the minimum payment rises above TOLLGATE_MIN_AMOUNT. A
   * decimal above 0 and at most 1 (default 0.5), or `off` (the configured minimum alone). On a devnet it
   * applies only when TOLLGATE_ETH_PRICE_USD is set.
   */
  TOLLGATE_MAX_FEE_SHARE: z
    .string()
    .trim()
    .regex(/^(off|0\.\d{0,5}[1-9]|1(\.0{1,6})?)$/, {
      error: "expected a decimal above 0 and at most 1 (e.g. 0.5), or off",
    })
    .optional(),
  /**
   * ETH in USD, the rate at which the gas of settling is compared with payments in USDC (no price feed
   * is read). Default 5000, above where ETH has traded, so a stale setting errs towards a higher minimum.
   */
  TOLLGATE_ETH_PRICE_USD: z
    .string()
    .trim()
    .regex(/^(?=.*[1-9])\d{1,12}(\.\d{1,6})?$/, {
      error: "expected a positive USD price such as 4000 or 3999.5",
    })
    .optional(),
  /** Rate limit per client address on the endpoints that cost chain work (default 120:20). */
  TOLLGATE_RATE_LIMIT_CLIENT: RateLimitSchema.optional(),
  /** Rate limit per payer address (default 60:10). */
  TOLLGATE_RATE_LIMIT_PAYER: RateLimitSchema.optional(),
  /** Rate limit per provider, for requests with its API key instead of the client's (default 600:100). */
  TOLLGATE_RATE_LIMIT_PROVIDER: RateLimitSchema.optional(),
  /** Comma-separated addresses of reverse proxies whose X-Forwarded-For is believed (default none). */
  TOLLGATE_TRUSTED_PROXIES: CommaListSchema.refine((list) => list.every((a) => isIP(a) !== 0), {
    error: "expected IP addresses, comma-separated",
  }).optional(),
  /**
   * How long an outbox row may wait for its receipt before the chain is asked whether it lost
   * transactions (outbox/rewindRepair.ts): a chain with slow blocks wants more than the default 15 s.
   */
  TOLLGATE_OUTBOX_STUCK_AFTER_MS: z.coerce.number().int().min(1_000).max(3_600_000).optional(),
  /** Bearer token for `GET /metrics`; unset, metrics are served to loopback peers only. */
  TOLLGATE_METRICS_TOKEN: z.string().min(16, { error: "use at least 16 characters" }).optional(),
  /**
   * The most any transaction of the gas key offers per gas (`maxFeePerGas`), in gwei, decimals allowed
   * (`0.5`, `50`). Above it, transactions wait for the chain's fee to fall (outbox/feeHold.ts). Default:
   * no maximum.
   */
  TOLLGATE_MAX_FEE_GWEI: z
    .string()
    .trim()
    .regex(/^\d{1,9}(\.\d{1,9})?$/, { error: "expected gwei, a decimal such as 0.5 or 50" })
    .transform((text) => parseGwei(text))
    .refine((wei) => wei > 0n, { error: "the maximum fee must be above 0" })
    .optional(),
  /** Warn when the gas key lasts fewer hours than this at its recent spending (gasRunway.ts; default 24). */
  TOLLGATE_GAS_RUNWAY_WARN_HOURS: z.coerce.number().min(0).max(10_000).default(24),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  // TOLLGATE_WEBHOOK_KEYS, TOLLGATE_WEBHOOK_ALLOW_TARGETS (webhooks/webhookConfig.ts).
  ...WebhookEnvSchema.shape,
});
export type FacilitatorEnv = z.infer<typeof FacilitatorEnvSchema>;

export type FacilitatorConfig = {
  dir: string;
  /** The first of `rpcUrls`. */
  rpcUrl: string;
  /** TOLLGATE_RPC_URL: one URL or several, in order of preference. */
  rpcUrls: string[];
  /** TOLLGATE_RPC_BATCH_SIZE. */
  rpcBatchSize: number;
  /** TOLLGATE_RPC_LOGS_RANGE: most blocks per `eth_getLogs` call. */
  logsRange: number;
  network: `eip155:${number}`;
  gasKey: `0x${string}`;
  proofKeys: ProofKey[];
  token: ConfiguredToken;
  batchSettler: Address;
  subscriptionManager: Address | undefined;
  channels: Address | undefined;
  confirmations: number;
  host: string;
  port: number;
  databaseUrl: string | undefined;
  dataDir: string;
  logLevel: FacilitatorEnv["LOG_LEVEL"];
  rateLimits: RateLimitOptions;
  /** TOLLGATE_MAX_FEE_SHARE and TOLLGATE_ETH_PRICE_USD (`false`: off); unset fields take their defaults. */
  settlementFee: { maxFeeShare?: string; ethPriceUsd?: string } | false;
  /** Sealing keys of webhook secrets and the non-public targets allowed (webhooks/webhookConfig.ts). */
  webhooks: WebhookConfig;
  metricsToken: string | undefined;
  /** The outbox's `stuckAfterMs` (TOLLGATE_OUTBOX_STUCK_AFTER_MS); undefined: its default. */
  outboxStuckAfterMs: number | undefined;
  /** TOLLGATE_MAX_FEE_GWEI in wei per gas; undefined: no maximum. */
  maxFeePerGas: bigint | undefined;
  /** TOLLGATE_GAS_RUNWAY_WARN_HOURS in seconds. */
  gasRunwayWarnSeconds: number;
};

/**
 * The token as configured. Its EIP-712 `name` and `version`, which every payer's signature commits to, are
 * `undefined` where neither TOLLGATE_TOKEN_NAME/VERSION, the devnet file nor the network's table says them
 * for this very token: `resolveTokenDomain` then reads them from the token on chain, never assumes them.
 */
export type ConfiguredToken = Omit<FacilitatorToken, "name" | "version"> & {
  name: string | undefined;
  version: string | undefined;
};

function missing(what: string, variable: string): never {
  throw new TollgateError(
    "InvalidRequest",
    `${what} is not configured: set ${variable}, or start a devnet with \`tollgate devnet up\``,
    { details: { variable } },
  );
}

/** Reads the proof keys from the environment, or the devnet's generated key (created on first use). */
function loadProofKeys(env: FacilitatorEnv, dir: string, onDevnet: boolean): ProofKey[] {
  if (env.TOLLGATE_PROOF_KEYS !== undefined) {
    return env.TOLLGATE_PROOF_KEYS.split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "")
      .map(parseProofKey);
  }
  if (!onDevnet) return missing("the proof-signing key", "TOLLGATE_PROOF_KEYS");
  const file = join(dir, "facilitator-proof-key");
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(file, `${generateProofKey().seed}\n`, { mode: 0o600 });
    chmodSync(file, 0o600);
  }
  return [parseProofKey(readFileSync(file, "utf8"))];
}

/** The environment parsed, or an error whose message names each bad variable (an operator reads it). */
function parseEnvironment(environment: Record<string, string | undefined>): FacilitatorEnv {
  const parsed = FacilitatorEnvSchema.safeParse(environment);
  if (parsed.success) return parsed.data;
  const issues = summarizeIssues(parsed.error.issues);
  throw new TollgateError(
    "InvalidRequest",
    `facilitator configuration: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
    { details: { issues } },
  );
}

/** Resolves the configuration from the environment (and the devnet file, when there is one). */
export function loadFacilitatorConfig(environment: Record<string, string | undefined>): FacilitatorConfig {
  // The deployment file's token and addresses fill what the environment leaves unset.
  const env = parseEnvironment(withDeploymentDefaults(environment));
  const dir = env.TOLLGATE_DIR;
  const { network, known, devnet } = placeOf(env, dir);
  // Read in this order, so that of several settings missing the operator is told of the same one first.
  const rpc = readRpc(env, devnet);
  const gasKey = readGasKey(env, devnet);
  const token = readToken(env, devnet, known);
  const contracts = readContracts(env, devnet);
  return {
    dir,
    ...rpc,
    network,
    gasKey,
    proofKeys: loadProofKeys(env, dir, devnet !== undefined),
    token,
    ...contracts,
    confirmations: env.TOLLGATE_CONFIRMATIONS ?? defaultConfirmations(network),
    host: env.TOLLGATE_HOST,
    port: env.TOLLGATE_PORT,
    databaseUrl: env.DATABASE_URL === "" ? undefined : env.DATABASE_URL,
    dataDir: join(dir, "pglite"),
    logLevel: env.LOG_LEVEL,
    webhooks: loadWebhookConfig(env, dir),
    settlementFee: readSettlementFee(env),
    rateLimits: {
      perClient: env.TOLLGATE_RATE_LIMIT_CLIENT,
      perPayer: env.TOLLGATE_RATE_LIMIT_PAYER,
      perProvider: env.TOLLGATE_RATE_LIMIT_PROVIDER,
      trustedProxies: env.TOLLGATE_TRUSTED_PROXIES,
    },
    metricsToken: env.TOLLGATE_METRICS_TOKEN === "" ? undefined : env.TOLLGATE_METRICS_TOKEN,
    outboxStuckAfterMs: env.TOLLGATE_OUTBOX_STUCK_AFTER_MS,
    maxFeePerGas: env.TOLLGATE_MAX_FEE_GWEI,
    gasRunwayWarnSeconds: env.TOLLGATE_GAS_RUNWAY_WARN_HOURS * 3_600,
  };
}

/**
 * The network served, Tollgate's table entry for it, and the devnet file when it describes that very
 * network (`undefined` otherwise: a devnet file of another chain supplies no defaults).
 */
function placeOf(
  env: FacilitatorEnv,
  dir: string,
): { network: `eip155:${number}`; known: NetworkConfig | undefined; devnet: DevnetFile | undefined } {
  const file = readDevnetFile(dir);
  const network = env.TOLLGATE_NETWORK ?? (file?.network as `eip155:${number}` | undefined) ?? "eip155:31337";
  const onDevnet = file !== undefined && file.network === network;
  return { network, known: getNetworkConfig(network), devnet: onDevnet ? file : undefined };
}

function readRpc(
  env: FacilitatorEnv,
  devnet: DevnetFile | undefined,
): Pick<FacilitatorConfig, "rpcUrl" | "rpcUrls" | "rpcBatchSize" | "logsRange"> {
  const rpcUrls =
    env.TOLLGATE_RPC_URL ??
    (devnet !== undefined ? [devnet.rpcUrl] : undefined) ??
    missing("the RPC URL", "TOLLGATE_RPC_URL");
  return {
    rpcUrl: rpcUrls[0]!,
    rpcUrls,
    rpcBatchSize: env.TOLLGATE_RPC_BATCH_SIZE,
    logsRange: env.TOLLGATE_RPC_LOGS_RANGE,
  };
}

function readGasKey(env: FacilitatorEnv, devnet: DevnetFile | undefined): `0x${string}` {
  // The devnet's last account pays gas: the others are left to payers and providers in examples.
  return (
    env.TOLLGATE_GAS_KEY ??
    (devnet !== undefined
      ? (devnet.accounts[devnet.accounts.length - 1]?.privateKey as `0x${string}`)
      : undefined) ??
    missing("the gas key", "TOLLGATE_GAS_KEY")
  );
}

function readToken(
  env: FacilitatorEnv,
  devnet: DevnetFile | undefined,
  known: NetworkConfig | undefined,
): ConfiguredToken {
  const address =
    env.TOLLGATE_TOKEN ??
    (devnet !== undefined ? (devnet.contracts.usd as Address) : known?.usdc) ??
    missing("the token", "TOLLGATE_TOKEN");
  // The domain Tollgate knows for this token: the devnet file's (read from the chain when the devnet
  // started), or the network table's for the network's own USDC. Any other token's is read from the chain.
  const domain =
    devnet !== undefined && isAddressEqual(address, devnet.contracts.usd as Address)
      ? devnet.token
      : known?.usdc !== undefined && isAddressEqual(address, known.usdc)
        ? known.tokenDomain
        : undefined;
  return {
    address,
    name: env.TOLLGATE_TOKEN_NAME ?? domain?.name,
    version: env.TOLLGATE_TOKEN_VERSION ?? domain?.version,
    symbol: "USDC",
    decimals: 6,
    // Unset: createFacilitator applies the network's default (abuse/minimumAmount.ts).
    minAmount:
      env.TOLLGATE_MIN_AMOUNT === undefined
        ? undefined
        : parseMoney(env.TOLLGATE_MIN_AMOUNT, "TOLLGATE_MIN_AMOUNT (--min-amount)"),
  };
}

function readContracts(
  env: FacilitatorEnv,
  devnet: DevnetFile | undefined,
): Pick<FacilitatorConfig, "batchSettler" | "subscriptionManager" | "channels"> {
  const batchSettler =
    env.TOLLGATE_BATCH_SETTLER ??
    (devnet !== undefined ? (devnet.contracts.batchSettler as Address) : undefined) ??
    missing("the BatchSettler address", "TOLLGATE_BATCH_SETTLER");
  const subscriptionManager =
    env.TOLLGATE_SUBSCRIPTION_MANAGER ??
    (devnet !== undefined ? (devnet.contracts.subscriptionManager as Address) : undefined);
  const channels =
    env.TOLLGATE_CHANNELS ??
    (devnet !== undefined ? (devnet.contracts.channels as Address | undefined) : undefined);
  return { batchSettler, subscriptionManager, channels };
}

function readSettlementFee(env: FacilitatorEnv): FacilitatorConfig["settlementFee"] {
  if (env.TOLLGATE_MAX_FEE_SHARE === "off") return false;
  return {
    ...(env.TOLLGATE_MAX_FEE_SHARE === undefined ? {} : { maxFeeShare: env.TOLLGATE_MAX_FEE_SHARE }),
    ...(env.TOLLGATE_ETH_PRICE_USD === undefined ? {} : { ethPriceUsd: env.TOLLGATE_ETH_PRICE_USD }),
  };
}

/**
 * The configured token with its EIP-712 name and version, each read from the token's `name()` and
 * `version()` where the configuration left it `undefined`. A token that answers neither is refused at
 * start-up: a facilitator that guessed its domain would accept signatures the token then rejects.
 *
 * @example
 * const token = await resolveTokenDomain(config.token, createPublicClient({ transport: rpcTransport(config.rpcUrls) }));
 */
export async function resolveTokenDomain(
  token: ConfiguredToken,
  client: ReadClient,
): Promise<FacilitatorToken> {
  const { name, version } = token;
  if (name !== undefined && version !== undefined) return { ...token, name, version };
  try {
    const onChain = await getTokenDomain(client, { token: token.address });
    return { ...token, name: name ?? onChain.name, version: version ?? onChain.version };
  } catch (error) {
    if (isChainUnreachable(error)) throw chainUnavailable(error);
    throw new TollgateError(
      "InvalidRequest",
      `the token ${token.address} does not answer name() and version(): set TOLLGATE_TOKEN_NAME and TOLLGATE_TOKEN_VERSION to its EIP-712 domain`,
      { cause: error, details: { token: token.address } },
    );
  }
}
