/**
 * Wires a facilitator: settlement engine, proof keys, metrics and the HTTP app over one store and one
 * chain connection. Nothing listens until `serveFacilitator` binds the app to a port.
 */
import { randomBytes } from "node:crypto";
import type { Hono } from "hono";
import pino, { type Logger } from "pino";
import {
  type Address,
  type Chain,
  createPublicClient,
  type LocalAccount,
  type PublicClient,
  type Transport,
} from "viem";
import {
  defaultConfirmations,
  devnetChain,
  getNetworkConfig,
  type NetworkConfig,
} from "../chain/networks.ts";
import { type RpcTransportOptions, rpcTransport } from "../chain/rpcTransport.ts";
import { parseRpcUrls } from "../chain/rpcUrls.ts";
import { createRateLimits, type RateLimitOptions, type RateLimits } from "../http/rateLimits.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import type { SupportedResponse } from "../protocol/facilitator.ts";
import { chainIdOf } from "../protocol/network.ts";
import type { Queryable, Store } from "../store/store.ts";
import { admitPayments } from "./abuse/admitPayments.ts";
import { defaultMinAmount } from "./abuse/minimumAmount.ts";
import {
  createSettlementFeeFloor,
  followsFee,
  type SettlementFeeFloor,
  type SettlementFeeOptions,
  supportedNow,
} from "./abuse/settlementFeeFloor.ts";
import { type ContractSigners, createContractSigners } from "./contractSigners.ts";
import { createFacilitatorApp } from "./createFacilitatorApp.ts";
import { createDashboardModule, type DashboardOptions } from "./dashboard/dashboardModule.ts";
import type { FacilitatorContext } from "./facilitatorContext.ts";
import type { FacilitatorModule, FacilitatorModuleFactory } from "./facilitatorModule.ts";
import {
  type BuiltFacilitatorSchemes,
  buildFacilitatorSchemes,
  type FacilitatorSchemePart,
  facilitatorSchemeList,
} from "./facilitatorSchemeParts.ts";
import { facilitatorSchemes } from "./facilitatorSchemes.ts";
import type { FacilitatorToken } from "./facilitatorToken.ts";
import { createGasAccount, type GasAccount } from "./gasAccount.ts";
import { feesCheck, gasCheck } from "./gasHealth.ts";
import { createGasRunway, type GasRunway, type GasRunwayOptions } from "./gasRunway.ts";
import { createFacilitatorMetrics, type FacilitatorMetrics } from "./metrics.ts";
import type { MetricsAccess } from "./metricsAccess.ts";
import { builtinModules } from "./modules.ts";
import { createOutbox, type OutboxOptions } from "./outbox/createOutbox.ts";
import { createGasKey, type GasKey } from "./outbox/gasKey.ts";
import type { Outbox } from "./outbox/outboxTypes.ts";
import type { ProofKey } from "./proofKeys.ts";
import { findProviderByApiKey } from "./providers/requireProvider.ts";
import { logRpcProviderEvents } from "./rpcProviderEvents.ts";
import {
  createSettlementEngine,
  type SettlementEngine,
  type SettlementEngineOptions,
  settlementFaults,
} from "./settlementEngine.ts";
import { createTokenPauseWatch, type TokenPauseWatch } from "./tokenPauseWatch.ts";
import {
  createWebhooksModule,
  type WebhooksModuleOptions,
  webhooksModule,
} from "./webhooks/createWebhooksModule.ts";

export type CreateFacilitatorOptions = {
  store: Store;
  /**
   * The chain: an RPC URL, several (an array, or comma-separated) in order of preference, or a viem
   * public client for it. Several URLs fail over and avoid a lagging node (src/chain/rpcTransport.ts).
   */
  rpcUrl?: string | readonly string[] | undefined;
  /**
   * How the client built from `rpcUrl` retries and fails over (src/chain/rpcTransport.ts): backoff
   * (200 ms doubling to 5 s, `Retry-After` honoured within 5 s, 3 retries), a failing provider passed over for
   * 30 s, a provider more than 5 blocks behind the others avoided (heads compared at most every 30 s,
   * beside the facilitator's own head reads).
   */
  rpcFailover?:
    | Pick<
        RpcTransportOptions,
        | "retryCount"
        | "backoffBaseMs"
        | "backoffMaxMs"
        | "cooldownMs"
        | "maxLagBlocks"
        | "headCheckMs"
        | "timeout"
      >
    | undefined;
  /**
   * How the client built from `rpcUrl` sends calls (src/chain/batchingHttp.ts): a call at once when no
   * request is open, the ones made meanwhile as one JSON-RPC batch of at most `maxBatchSize` (100; 1
   * never batches); a call that waited `maxWaitMs` (50) opens another request, up to `maxInFlight` (4).
   */
  rpcBatch?:
    | {
        maxBatchSize?: number | undefined;
        maxWaitMs?: number | undefined;
        maxInFlight?: number | undefined;
      }
    | undefined;
  publicClient?: PublicClient<Transport, Chain> | undefined;
  network: `eip155:${number}`;
  /** The key that pays gas for settlement and relayed calls. */
  gasAccount: LocalAccount;
  /** Proof-signing keys; the first signs new proofs, the others still verify (rotation). */
  proofKeys: readonly ProofKey[];
  batchSettler: Address;
  subscriptionManager?: Address | undefined;
  /** TollgateChannels: enables the channel API and claim worker (docs/channels.md). */
  channels?: Address | undefined;
  tokens: readonly FacilitatorToken[];
  clock?: Clock | undefined;
  logger?: Logger | undefined;
  /**
   * Blocks that must hold a settlement before the payment counts as settled and its proof is issued.
   * Default: the network's (src/chain/networks.ts `CONFIRMATIONS`: 2 on Base, 1 on Base Sepolia and a
   * devnet, 1 elsewhere).
   */
  confirmations?: number | undefined;
  /** Most blocks one `eth_getLogs` call spans (default 2 000): RPC providers cap it. */
  logsRange?: number | undefined;
  settlement?:
    | Pick<
        SettlementEngineOptions,
        | "maxBatchSize"
        | "lingerMs"
        | "maxInFlight"
        | "proofTtlSeconds"
        | "authorizeTimeoutMs"
        | "reconcileIntervalMs"
        | "idlePollMs"
        | "reorgWindowBlocks"
        | "reorgCheckIntervalMs"
        | "faults"
      >
    | undefined;
  /**
   * The transaction outbox's settings (outbox/createOutbox.ts): reconcile interval, how long a row may
   * go untouched before another instance drives it, when an unmined transaction is replaced with a
   * higher fee and the fee ceiling, crash-test faults.
   */
  outbox?:
    | Pick<
        OutboxOptions,
        | "reconcileIntervalMs"
        | "idlePollMs"
        | "staleMs"
        | "receiptTimeoutMs"
        | "bumpAfterMs"
        | "maxFeePerGas"
        | "stuckAfterMs"
        | "reorgWindowBlocks"
        | "reorgCheckIntervalMs"
        | "faults"
      >
    | undefined;
  maxBodyBytes?: number | undefined;
  /**
   * Rate limits per client address and per payer on the endpoints that cost chain work (429
   * `RateLimited`; defaults in abuse/rateLimits.ts). Held in this process: limits are per instance.
   */
  rateLimits?: RateLimitOptions | undefined;
  /**
   * The minimum payment that follows the network's fee (abuse/settlementFeeFloor.ts): a payment whose
   * batched settlement would cost more than `maxFeeShare` (default 0.5) of its value, at `ethPriceUsd`
   * (default 5000), is refused, and `/supported` publishes the minimum in force. On by default on a real
   * network; on a devnet only when `ethPriceUsd` is given. `false` turns it off (the configured
   * `minAmount` alone).
   */
  settlementFee?: SettlementFeeOptions | false | undefined;
  /** Who may read `/metrics` (default: loopback peers only; see metricsAccess.ts). */
  metricsAccess?: MetricsAccess | undefined;
  /**
   * The gas key's runway (gasRunway.ts): when to warn (`warnBelowSeconds`, default a day), the window
   * whose spend sets the pace (24 h), the least time between two balance reads (60 s).
   */
  gasRunway?: Pick<GasRunwayOptions, "warnBelowSeconds" | "windowMs" | "minSpanMs" | "refreshMs"> | undefined;
  /** How often each token's `paused()` is read (tokenPauseWatch.ts; default 15 000 ms). */
  tokenPause?: { intervalMs?: number | undefined } | undefined;
  /**
   * Options of the built-in webhooks module: the non-public targets allowed (none by default), the
   * keys that seal secrets at rest, … (see webhooks/createWebhooksModule.ts).
   */
  webhooks?: WebhooksModuleOptions | undefined;
  /** Modules beyond the built-in ones (see modules.ts). */
  modules?: readonly FacilitatorModuleFactory[] | undefined;
  /**
   * Scheme facilitator parts beyond the built-in ones (facilitatorSchemes.ts), or configured built-in
   * ones: a part with a built-in id takes its place (`channelFacilitator({ claims: false })`), any
   * other is added after them (docs/schemes.md).
   */
  schemes?: readonly FacilitatorSchemePart[] | undefined;
  /**
   * Serve the web dashboard at `/dashboard` (docs/dashboard.md; off unless given). It seals rotated
   * webhook secrets with the webhooks module's keys.
   */
  dashboard?: Omit<DashboardOptions, "webhookSecretKeys" | "schemes"> | undefined;
  /**
   * Run the built-in modules and scheme parts (default true). `false` runs only `modules`, `schemes`
   * and the core scheme parts (`exact`, x402), e.g. to configure the keeper interval differently.
   */
  builtinModules?: boolean | undefined;
};

export type Facilitator = {
  app: Hono;
  context: FacilitatorContext;
  /** The scheme parts this facilitator runs, by scheme id (their `check` and `settle`). */
  schemes: BuiltFacilitatorSchemes["parts"];
  engine: SettlementEngine;
  metrics: FacilitatorMetrics;
  publicClient: PublicClient<Transport, Chain>;
  store: Store;
  supported: SupportedResponse;
  start(): Promise<void>;
  stop(): Promise<void>;
};

/**
 * @example
 * const facilitator = createFacilitator({ store, rpcUrl, network: "eip155:31337", gasAccount, proofKeys: [key],
 *   batchSettler, tokens: [{ address: usd, name: "USD Coin", version: "2", symbol: "USDC", decimals: 6 }] });
 * await facilitator.start();
 * const server = await serveFacilitator(facilitator, { port: 4020 });
 */
export function createFacilitator(options: CreateFacilitatorOptions): Facilitator {
  if (options.proofKeys.length === 0) throw new TypeError("a facilitator needs at least one proof key");
  if (options.tokens.length === 0) throw new TypeError("a facilitator needs at least one token");
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? pino({ level: "silent" });
  const chainId = chainIdOf(options.network);
  const config = getNetworkConfig(options.network);
  const confirmations = options.confirmations ?? defaultConfirmations(options.network);
  if (options.publicClient === undefined && options.rpcUrl === undefined) {
    throw new TypeError("createFacilitator needs rpcUrl or publicClient");
  }
  const metrics = createFacilitatorMetrics();
  const publicClient = facilitatorPublicClient(options, { logger, metrics, chainId, config });
  const setup: FacilitatorSetup = {
    options,
    clock,
    logger,
    chainId,
    isDevnet: config?.isDevnet === true,
    confirmations,
    metrics,
    publicClient,
  };
  const admission = admissionParts(setup);
  const gasParts = createGasParts(setup);
  const tokenPause = pauseWatch(setup);
  const engine = paymentEngine(setup, admission, gasParts.outbox, tokenPause);
  const supported = facilitatorSupported(options, admission);
  const context: FacilitatorContext = {
    store: options.store,
    publicClient,
    gas: gasParts.gas,
    outbox: gasParts.outbox,
    network: options.network,
    chainId,
    batchSettler: options.batchSettler,
    subscriptionManager: options.subscriptionManager,
    channels: options.channels,
    tokens: admission.tokenConfigs,
    logsRange: options.logsRange,
    engine,
    contractSigners: admission.contractSigners,
    tokenPause,
    proofKeys: () => options.proofKeys,
    supported,
    clock,
    logger,
    metrics,
    recordEvent,
  };
  const { schemes, modules } = facilitatorModules(options, context, logger);
  const app = facilitatorApp(setup, { admission, gasParts, tokenPause, supported, schemes, modules });
  return {
    app,
    context,
    schemes: schemes.parts,
    engine,
    metrics,
    publicClient,
    store: options.store,
    supported,
    ...facilitatorLifecycle({
      tokenPause,
      engine,
      outbox: gasParts.outbox,
      runway: gasParts.runway,
      schemes,
      modules,
    }),
  };
}

/** What every part of a facilitator is built from: its options, clock, logger, chain and metrics. */
type FacilitatorSetup = {
  options: CreateFacilitatorOptions;
  clock: Clock;
  logger: Logger;
  chainId: number;
  /** A devnet is one the network table says is; any other chain's gas costs. */
  isDevnet: boolean;
  confirmations: number;
  metrics: FacilitatorMetrics;
  publicClient: PublicClient<Transport, Chain>;
};

/** Whether the token's issuer paused it: everything that moves the token holds meanwhile. */
function pauseWatch(setup: FacilitatorSetup): TokenPauseWatch {
  const { options, clock, logger, chainId, metrics, publicClient } = setup;
  return createTokenPauseWatch({
    store: options.store,
    client: publicClient,
    chainId,
    network: options.network,
    tokens: options.tokens,
    clock,
    logger,
    metrics,
    recordEvent,
    intervalMs: options.tokenPause?.intervalMs,
  });
}

async function recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void> {
  await db.query("INSERT INTO events (type, data) VALUES ($1, $2)", [type, data]);
}

/** The given public client, or one over `rpcUrl` with failover, batching and logged provider events. */
function facilitatorPublicClient(
  options: CreateFacilitatorOptions,
  deps: { logger: Logger; metrics: FacilitatorMetrics; chainId: number; config: NetworkConfig | undefined },
): PublicClient<Transport, Chain> {
  const { logger, metrics, chainId, config } = deps;
  const rpcUrls =
    options.rpcUrl === undefined
      ? []
      : typeof options.rpcUrl === "string"
        ? parseRpcUrls(options.rpcUrl)
        : parseRpcUrls(options.rpcUrl.join(","));
  const rpcEvents = logRpcProviderEvents(logger.child({ component: "rpc" }), metrics);
  return (
    options.publicClient ??
    createPublicClient({
      chain: config?.chain ?? { ...devnetChain, id: chainId },
      transport: rpcTransport(rpcUrls, {
        timeout: 10_000,
        ...options.rpcBatch,
        ...options.rpcFailover,
        onBatchRefused: (reason) =>
          logger.warn(
            { reason },
            "the RPC node refused a batch of calls; sending them one by one from now on",
          ),
        onEvent: (event) => rpcEvents(event),
      }),
      // A devnet mines on demand: poll receipts quickly. Real chains have block times of seconds.
      pollingInterval: config?.isDevnet === false ? 1_000 : 50,
    })
  );
}

/** What a payment passes before it reaches the engine: its token, minimum, fee floor and rate limits. */
type AdmissionParts = {
  tokenConfigs: (FacilitatorToken & { minAmount: bigint })[];
  tokens: Map<string, FacilitatorToken & { minAmount: bigint }>;
  feeFloor: SettlementFeeFloor | undefined;
  rateLimits: RateLimits;
  contractSigners: ContractSigners;
};

function admissionParts(setup: FacilitatorSetup): AdmissionParts {
  const { options, clock, logger, metrics, publicClient } = setup;
  // A token without its own minimum gets the network's default (abuse/minimumAmount.ts).
  const tokenConfigs = options.tokens.map((t) => ({
    ...t,
    minAmount: t.minAmount ?? defaultMinAmount(options.network, t.decimals),
  }));
  const tokens = new Map(tokenConfigs.map((t) => [t.address.toLowerCase(), t]));
  const settlementFee = options.settlementFee;
  const feeFloor = followsFee(settlementFee, setup.isDevnet)
    ? createSettlementFeeFloor({
        ...settlementFee,
        client: publicClient,
        tokens: tokenConfigs,
        maxFeePerGas: options.outbox?.maxFeePerGas,
        onReading: (token, minimum, cost) => metrics.onPaymentMinimum(token, minimum, cost),
        clock,
        logger,
      })
    : undefined;
  const rateLimits = createRateLimits({
    ...options.rateLimits,
    clock,
    // A gate's requests with its provider key take that provider's own allowance (abuse/rateLimits.ts).
    findProvider: (apiKey) => findProviderByApiKey(options.store, apiKey),
  });
  // Smart-contract wallet payers (ERC-1271): one "has code" cache for every path that checks them.
  const contractSigners = createContractSigners({ client: publicClient, clock });
  return { tokenConfigs, tokens, feeFloor, rateLimits, contractSigners };
}

/** The gas key, its runway, the one outbox every transaction of the key goes through, and the gas account. */
type GasParts = { key: GasKey; runway: GasRunway; outbox: Outbox; gas: GasAccount };

function createGasParts(setup: FacilitatorSetup): GasParts {
  const { options, clock, logger, chainId, metrics, publicClient } = setup;
  const key = createGasKey({
    account: options.gasAccount,
    client: publicClient,
    chainId,
    clock,
    maxFeePerGas: options.outbox?.maxFeePerGas,
  });
  // How long the gas key lasts: read at start and after outcomes, never at rest.
  const runway = createGasRunway({
    store: options.store,
    client: publicClient,
    address: key.address,
    chainId,
    clock,
    logger,
    ...options.gasRunway,
  });
  // One outbox for every transaction of the gas key: settlement, relayed calls, renewals, usage, claims.
  const outbox = createOutbox({
    store: options.store,
    client: publicClient,
    key,
    clock,
    logger,
    confirmations: setup.confirmations,
    reconcileIntervalMs: options.settlement?.reconcileIntervalMs,
    // The reorganisation watch is the outbox's (outbox/confirmedRowWatch.ts); the settlement options
    // that set it before still do.
    reorgWindowBlocks: options.settlement?.reorgWindowBlocks,
    reorgCheckIntervalMs: options.settlement?.reorgCheckIntervalMs,
    ...options.outbox,
    onOutcome: () => runway.noteOutcome(),
    onReopened: (kind) => metrics.onReorgReopened(kind),
    faults: options.outbox?.faults ?? settlementFaults(options.settlement?.faults),
  });
  metrics.watchGas({
    feeHold: () => outbox.feeHold(),
    feeAsked: () => key.wantedFee(),
    ceiling: key.maxFeePerGas,
    runway: () => runway.state(),
  });
  const gas = createGasAccount({ key, outbox, client: publicClient, logger });
  return { key, runway, outbox, gas };
}

/**
 * The settlement engine behind the admission checks: everything that reaches the engine from outside
 * passes the off-chain checks and the payer's rate limit first (abuse/admitPayments.ts).
 */
function paymentEngine(
  setup: FacilitatorSetup,
  admission: AdmissionParts,
  outbox: Outbox,
  tokenPause: TokenPauseWatch,
): SettlementEngine {
  const { options, clock, logger, chainId, metrics, publicClient } = setup;
  const { tokens, contractSigners } = admission;
  const proofKeys = options.proofKeys;
  const settlementEngine = createSettlementEngine({
    store: options.store,
    client: publicClient,
    outbox,
    network: options.network,
    chainId,
    batchSettler: options.batchSettler,
    tokens,
    proofKey: () => proofKeys[0]!,
    clock,
    logger,
    metrics,
    contractSigners,
    confirmations: setup.confirmations,
    tokenPause,
    ...options.settlement,
  });
  return admitPayments(settlementEngine, {
    network: options.network,
    tokens,
    clock,
    limits: admission.rateLimits,
    contractSigners,
    feeFloor: admission.feeFloor,
  });
}

/** The `/supported` answer: the network, its tokens with their minimums, the contracts and the signer. */
function facilitatorSupported(
  options: CreateFacilitatorOptions,
  admission: AdmissionParts,
): SupportedResponse {
  const { tokenConfigs, feeFloor } = admission;
  return {
    version: "1",
    schemes: options.subscriptionManager === undefined ? ["exact"] : ["exact", "subscription"],
    networks: [
      {
        network: options.network,
        tokens: tokenConfigs.map((t) => ({
          address: t.address,
          symbol: t.symbol,
          decimals: t.decimals,
          eip712: { name: t.name, version: t.version },
          minAmount: t.minAmount.toString(),
          ...(feeFloor === undefined ? {} : { minAmountFloor: t.minAmount.toString() }),
        })),
        batchSettler: options.batchSettler,
        ...(options.subscriptionManager === undefined
          ? {}
          : { subscriptionManager: options.subscriptionManager }),
        ...(options.channels === undefined ? {} : { channels: options.channels }),
        signers: [options.gasAccount.address],
      },
    ],
  };
}

/** The scheme parts and modules this facilitator runs, the dashboard (if any) last. */
function facilitatorModules(
  options: CreateFacilitatorOptions,
  context: FacilitatorContext,
  logger: Logger,
): { schemes: BuiltFacilitatorSchemes; modules: FacilitatorModule[] } {
  // The dashboard rotates webhook secrets: it and the webhooks module must seal with the same keys.
  let webhookOptions = options.webhooks;
  if (options.dashboard !== undefined && (webhookOptions?.secretKeys ?? []).length === 0) {
    logger.warn("webhook secrets are sealed with a key of this process only; configure webhook secret keys");
    webhookOptions = { ...webhookOptions, secretKeys: [new Uint8Array(randomBytes(32))] };
  }
  const moduleFactories = [
    ...(options.builtinModules === false
      ? []
      : builtinModules.map((m) =>
          m === webhooksModule && webhookOptions !== undefined ? createWebhooksModule(webhookOptions) : m,
        )),
    ...(options.modules ?? []),
  ];
  // Scheme parts first, in list order: what each payment scheme does here (routes, checks,
  // settlement, workers). Parts carried by modules and given in `schemes` take a built-in one's place.
  const schemes = buildFacilitatorSchemes(
    context,
    facilitatorSchemeList(
      facilitatorSchemes.filter((part) => options.builtinModules !== false || part.core === true),
      [...moduleFactories.flatMap((factory) => factory.schemes ?? []), ...(options.schemes ?? [])],
    ),
  );
  // The dashboard last: it shows what the scheme parts contribute to it.
  if (options.dashboard !== undefined) {
    moduleFactories.push(
      createDashboardModule({
        ...options.dashboard,
        webhookSecretKeys: webhookOptions?.secretKeys ?? [],
        schemes: [...schemes.parts.values()].flatMap((part) => part.dashboard ?? []),
      }),
    );
  }
  return { schemes, modules: moduleFactories.map((factory) => factory(context)) };
}

/** The facilitator's HTTP app: the core endpoints, then the scheme parts' and modules' routes. */
function facilitatorApp(
  setup: FacilitatorSetup,
  parts: {
    admission: AdmissionParts;
    gasParts: GasParts;
    tokenPause: TokenPauseWatch;
    supported: SupportedResponse;
    schemes: BuiltFacilitatorSchemes;
    modules: readonly FacilitatorModule[];
  },
): Hono {
  const { options, clock, logger, metrics, publicClient } = setup;
  const { admission, supported, schemes, modules } = parts;
  const { feeFloor } = admission;
  const { key, runway, outbox } = parts.gasParts;
  return createFacilitatorApp({
    store: options.store,
    proofKeys: () => options.proofKeys,
    supported,
    currentSupported: feeFloor === undefined ? undefined : () => supportedNow(supported, feeFloor),
    clock,
    logger,
    metrics,
    chainHealth: () => publicClient.getBlockNumber({ cacheTime: 0 }),
    pausedTokens: () => parts.tokenPause.paused(),
    gasChecks: async (detailed) => ({
      fees: feesCheck(outbox.feeHold(), key.maxFeePerGas, detailed),
      gas: gasCheck(detailed ? await runway.fresh() : runway.state(), detailed),
    }),
    maxBodyBytes: options.maxBodyBytes,
    limitClients: admission.rateLimits.clientMiddleware,
    limitedPaths: schemes.rateLimited,
    metricsAccess: options.metricsAccess,
    extend: (a) => {
      schemes.routes(a);
      for (const m of modules) m.routes?.(a);
    },
  });
}

/** Starts the workers in order (pause state, engine, outbox, runway, scheme parts, modules); stops in reverse. */
function facilitatorLifecycle(parts: {
  tokenPause: TokenPauseWatch;
  engine: SettlementEngine;
  outbox: Outbox;
  runway: GasRunway;
  schemes: BuiltFacilitatorSchemes;
  modules: readonly FacilitatorModule[];
}): Pick<Facilitator, "start" | "stop"> {
  const { tokenPause, engine, outbox, runway, schemes, modules } = parts;
  const started: FacilitatorModule[] = [];
  return {
    async start() {
      // Handlers are registered at construction (engine, modules), so the outbox's first pass can
      // finish what a crashed process left open; the engine first adopts batches of an older version.
      // The pause state first: what an earlier run recorded holds the workers from their first round.
      await tokenPause.start();
      await engine.start();
      await outbox.start();
      await runway.start();
      await schemes.start();
      for (const m of modules) {
        await m.start?.();
        started.push(m);
      }
    },
    async stop() {
      for (const m of started.reverse()) await m.stop?.();
      started.length = 0;
      await schemes.stop();
      await engine.stop();
      await outbox.stop();
      runway.stop();
      await tokenPause.stop();
    },
  };
}

export { type RunningServer, serveApp } from "../http/serveApp.ts";
