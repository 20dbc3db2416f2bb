/**
 * Tollgate's one-time stack for the paid-request bench: a facilitator (PGlite in memory, its chain
 * client counted), a Hono API behind `paymentGate`, and one `fetchWithPayment` per payer.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import pino from "pino";
import { type Address, createPublicClient, type Hex } from "viem";
import { batchingHttp } from "../../src/chain/batchingHttp.ts";
import { privateKeyAccount } from "../../src/chain/signers/privateKeyAccount.ts";
import type { Devnet, DevnetAccount } from "../../src/chain/startDevnet.ts";
import { createFacilitator, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import type { FetchFn } from "../../src/http/facilitatorClient.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import { lazyPayingFetches, type PayerSpec } from "./payingFetch.ts";
import type { RpcCounter } from "./rpcCounter.ts";

export type PaidStack = {
  name: string;
  /** The paid resource. */
  url: string;
  /** The account that sends the facilitator's transactions. */
  gasAddress: Address;
  /** Counts the JSON-RPC calls of this stack's facilitator. */
  rpc: RpcCounter;
  /** A paying `fetch` for payer `index`. */
  payingFetch(index: number): FetchFn;
  /** What a payer process needs to build the same paying fetches (payerProcess.ts). */
  payers: { spec: PayerSpec; keys: Hex[] };
  /** Failures the facilitator saw that the client cannot tell apart, by reason (x402 only). */
  facilitatorFailures(): Map<string, number>;
  stop(): Promise<void>;
};

export async function startTollgateStack(options: {
  devnet: Devnet;
  gas: DevnetAccount;
  payers: readonly DevnetAccount[];
  payTo: Address;
  price: bigint;
  path: string;
  rpc: RpcCounter;
  /** PostgreSQL for the facilitator's store (a throwaway schema); in-memory PGlite when absent. */
  databaseUrl?: string | undefined;
}): Promise<PaidStack> {
  const { devnet } = options;
  const store = await createTestStore({ databaseUrl: options.databaseUrl });
  // The client createFacilitator would build from an RPC URL on a devnet, with its calls counted.
  const publicClient = createPublicClient({
    chain: devnet.chain,
    transport: batchingHttp(devnet.rpcUrl, { retryCount: 1, timeout: 10_000, fetchFn: options.rpc.fetchFn }),
    pollingInterval: 50,
  });
  const facilitator = createFacilitator({
    // `TOLLGATE_BENCH_LOG=warn` (or another pino level) prints the facilitator's log to stderr: a
    // stalled cell then shows what the facilitator did (a repaired nonce gap, a chain that went away).
    logger: benchLogger(),
    store,
    publicClient,
    network: devnet.network,
    // Tollgate's account helper: its batch transactions signed by libsecp256k1 (privateKeyAccount.ts).
    gasAccount: privateKeyAccount(options.gas.privateKey),
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    // The devnet's token with its EIP-712 domain as read from the chain (FiatToken: "USD Coin"/"2").
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    // The bench drives the stack as fast as it goes, every client from loopback and each payer in a
    // tight loop: rate limits would measure themselves, not the stack (docs/facilitator.md, "Abuse").
    rateLimits: { perClient: false, perPayer: false },
  });
  await facilitator.start();
  const facilitatorServer = await serveApp(facilitator.app);

  const gate = paymentGate({
    payTo: options.payTo,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: facilitatorServer.url,
    fetch,
    memoSecret: randomBytes(32),
    routes: { [`GET ${options.path}`]: { amount: options.price, description: "one item" } },
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get(options.path, (c) => c.json({ item: 1, paidBy: c.get("payment")?.payer }));
  const api = await serveApp(app);

  const spec: PayerSpec = {
    kind: "tollgate",
    network: devnet.network,
    facilitatorUrl: facilitatorServer.url,
    maxPrice: options.price.toString(),
  };
  const keys = options.payers.map((p) => p.privateKey);
  const paying = lazyPayingFetches(spec, keys);
  return {
    name: "Tollgate",
    url: `${api.url}${options.path}`,
    gasAddress: options.gas.address,
    rpc: options.rpc,
    payingFetch: paying,
    payers: { spec, keys },
    facilitatorFailures: () => new Map(),
    async stop() {
      await api.close();
      await facilitatorServer.close();
      await facilitator.stop();
      await store.close();
    },
  };
}

/** The facilitator's logger for a bench run: silent unless `TOLLGATE_BENCH_LOG` names a level. */
function benchLogger(): pino.Logger | undefined {
  const level = process.env.TOLLGATE_BENCH_LOG;
  if (level === undefined || level === "") return undefined;
  return pino({ level, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination(2));
}
