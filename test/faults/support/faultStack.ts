/**
 * The stack the fault suite and the soak run against, all real processes: anvil keeping its chain in a
 * state file, a fresh PostgreSQL database per run, 2–3 `tollgate facilitator` instances on it sharing one
 * gas key, 2 gate processes sharing a Redis replay guard, a provider with a webhook endpoint received
 * here, and a subscription plan. Also the fault injectors: SIGKILL, restarting anvil, terminating the
 * facilitators' PostgreSQL backends, killing the gates' Redis connections, and (with `rpcFaults`) the
 * chain's own misbehaviours (chainFaults.ts), the facilitators then reading the chain through an RPC
 * fault proxy.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { createClient } from "redis";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { setChannelOperator } from "../../../src/chain/actions/channels/setChannelOperator.ts";
import { createPlan } from "../../../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../../../src/chain/actions/subscriptions/setOperator.ts";
import { getPlanIdFromReceipt } from "../../../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, setUpDevnet } from "../../../src/chain/startDevnet.ts";
import { registerProvider } from "../../../src/client/registerProvider.ts";
import { generateProofKey } from "../../../src/facilitator/proofKeys.ts";
import { CreateWebhookResponseSchema } from "../../../src/facilitator/webhooks/webhookApi.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../../../src/http/facilitatorClient.ts";
import { WebhookEventSchema } from "../../../src/protocol/webhook.ts";
import { type RpcFaultProxy, startRpcFaultProxy } from "../../support/rpcFaultProxy.ts";
import { type ChainFaults, createChainFaults } from "./chainFaults.ts";
import {
  facilitatorProcess,
  freePort,
  gateProcess,
  type Restartable,
  startEventually,
  statefulAnvil,
} from "./processes.ts";

export const PRICE = 10_000n;
export const PLAN_PRICE = 1_000_000n;
/**
 * A one-minute plan: renewals fall due in real time. Advancing anvil's clock instead would put the chain
 * ahead of the payers' clocks and expire every one-time authorization (EIP-3009 `validBefore` is checked
 * against the block's timestamp).
 */
export const PLAN_INTERVAL = 60;
/** The metered plan: 30 days, 10 units included, 0.001 USDC a unit past them. */
export const METERED = { price: 100_000n, includedUnits: 10, unitPrice: 1_000n, interval: 30 * 86_400 };
/** Where clients reach the gates (subscription tokens name it). */
export const PUBLIC_ORIGIN = "https://faults.api.test";
/** The price of `GET /api/channel`, paid by voucher. */
export const CHANNEL_PRICE = 1_000n;
/**
 * How long the gates hold a proof in flight (`proofLeaseSeconds`): well above the slow route's handler
 * time, short enough that a payer whose gate was killed mid-request is served within the run.
 */
export const PROOF_LEASE_SECONDS = 5;

export type FaultStackOptions = {
  facilitators: number;
  gates: number;
  /** Admin connection to the PostgreSQL server; a database is created for the run and dropped after. */
  databaseUrl: string;
  redisUrl: string;
  /** Fresh payer accounts funded for one-time payments. */
  payers: number;
  /** Fresh subscriber accounts funded for the plan. */
  subscribers: number;
  /** Fresh accounts for the metered plan, for channel vouchers and for agents (default 0 each). */
  meteredSubscribers?: number;
  channelPayers?: number;
  agents?: number;
  /** Handler delay of `GET /api/slow` (the window for killing a gate mid-request). */
  slowMs?: number;
  /**
   * The facilitators read the chain through an RPC fault proxy (test/support/rpcFaultProxy.ts), and
   * `faults.chain` injects the chain's misbehaviours (default false: they talk to anvil directly).
   */
  rpcFaults?: boolean;
};

export type FaultStack = {
  devnet: Devnet;
  anvil: Restartable;
  /** The proxy between the facilitators and anvil, with `rpcFaults`. */
  rpcProxy: RpcFaultProxy | undefined;
  facilitators: Restartable[];
  facilitatorUrls: string[];
  gates: Restartable[];
  gateUrls: string[];
  /** The run's database: its URL and an open pool for the reconciliation. */
  database: { name: string; url: string };
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
  payTo: DevnetAccount;
  apiKey: string;
  planId: bigint;
  meteredPlanId: bigint;
  payers: DevnetAccount[];
  subscribers: DevnetAccount[];
  meteredSubscribers: DevnetAccount[];
  channelPayers: DevnetAccount[];
  agents: DevnetAccount[];
  gasAddress: Address;
  /** A facilitator client over every instance (fallbacks in order). */
  client(): FacilitatorClient;
  /** Webhook events received, by id (duplicates counted). */
  webhooks: { received: Map<string, { type: string; count: number; data: Record<string, unknown> }> };
  faults: {
    /** Terminates every PostgreSQL backend of the run's database but the suite's own; returns how many. */
    terminateBackends(): Promise<number>;
    /** Kills the gates' Redis connections (CLIENT KILL by name); returns how many. */
    killRedisConnections(): Promise<number>;
    /** Stops anvil (its state dumped on exit) and starts it again on the same port and chain. */
    restartAnvil(): Promise<void>;
    /** Rollbacks, reorganisations, fee spikes, 429 storms, a stale node: with `rpcFaults` only. */
    chain: ChainFaults | undefined;
  };
  stop(): Promise<void>;
};

/** `postgres://…/<name>`: the same server as `adminUrl`, another database. */
function databaseUrlFor(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.href;
}

async function adminQuery(adminUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Starts everything; if a part fails, what started is stopped before rethrowing. */
export async function startFaultStack(options: FaultStackOptions): Promise<FaultStack> {
  const stops: (() => Promise<void> | void)[] = [];
  const stopAll = async () => {
    for (const stop of stops.reverse()) {
      try {
        await stop();
      } catch {
        // Keep stopping the rest.
      }
    }
    stops.length = 0;
  };
  try {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-faults-"));
    stops.push(() => rmSync(dir, { recursive: true, force: true }));
    const runId = randomBytes(5).toString("hex");

    // The chain.
    const anvilPort = await freePort();
    const anvil = statefulAnvil({ port: anvilPort, stateFile: join(dir, "anvil-state.json"), accounts: 4 });
    await anvil.start();
    stops.push(() => anvil.stop("SIGKILL"));
    const rpcUrl = `http://127.0.0.1:${anvilPort}`;
    const devnet = await setUpDevnet(rpcUrl, 4, 10_000_000_000n, async () => {});
    const gas = devnet.accounts[3]!;
    // The facilitators' RPC: anvil, or a fault proxy in front of it (which outlives anvil's restarts).
    const rpcProxy =
      options.rpcFaults === true ? await startRpcFaultProxy(rpcUrl, {}, { webSocket: "pipe" }) : undefined;
    if (rpcProxy !== undefined) stops.push(() => rpcProxy.close());
    const facilitatorRpcUrl = rpcProxy?.url ?? rpcUrl;

    // A database of its own for the run.
    const name = `tollgate_faults_${runId}`;
    await adminQuery(options.databaseUrl, `CREATE DATABASE ${name}`);
    stops.push(() => adminQuery(options.databaseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    const url = databaseUrlFor(options.databaseUrl, name);
    const pool = new pg.Pool({ connectionString: url, max: 2, application_name: "tollgate-faults-suite" });
    pool.on("error", () => {});
    stops.push(() => pool.end());

    // Facilitator instances: one gas key, one proof key, one webhook sealing key, one database.
    const proofSeed = generateProofKey().seed;
    const webhookKey = randomBytes(32).toString("base64url");
    const facilitatorPorts = await Promise.all(
      Array.from({ length: options.facilitators }, () => freePort()),
    );
    const facilitatorUrls = facilitatorPorts.map((port) => `http://127.0.0.1:${port}`);
    const facilitators = facilitatorPorts.map((port, i) =>
      facilitatorProcess(`facilitator-${i}`, {
        TOLLGATE_DIR: join(dir, `facilitator-${i}`),
        TOLLGATE_RPC_URL: facilitatorRpcUrl,
        TOLLGATE_NETWORK: devnet.network,
        TOLLGATE_GAS_KEY: gas.privateKey,
        TOLLGATE_PROOF_KEYS: proofSeed,
        TOLLGATE_TOKEN: devnet.contracts.usd,
        TOLLGATE_BATCH_SETTLER: devnet.contracts.batchSettler,
        TOLLGATE_SUBSCRIPTION_MANAGER: devnet.contracts.subscriptionManager,
        ...(devnet.contracts.channels === undefined ? {} : { TOLLGATE_CHANNELS: devnet.contracts.channels }),
        DATABASE_URL: url,
        TOLLGATE_PORT: String(port),
        TOLLGATE_HOST: "127.0.0.1",
        TOLLGATE_WEBHOOK_KEYS: webhookKey,
        TOLLGATE_WEBHOOK_ALLOW_TARGETS: "127.0.0.0/8",
        TOLLGATE_RATE_LIMIT_CLIENT: "off",
        TOLLGATE_RATE_LIMIT_PAYER: "off",
        TOLLGATE_DASHBOARD: "off",
        LOG_LEVEL: "warn",
      }),
    );
    // The first applies the migrations; the others start on the migrated database.
    await facilitators[0]!.start();
    await Promise.all(facilitators.slice(1).map((f) => f.start()));
    stops.push(() => Promise.all(facilitators.map((f) => f.stop("SIGKILL"))).then(() => {}));
    const client = () =>
      createFacilitatorClient({ url: facilitatorUrls[0]!, fallbackUrls: facilitatorUrls.slice(1), fetch });

    // The provider: registered, with a webhook endpoint on a receiver here.
    const payToKey = generatePrivateKey();
    const payTo: DevnetAccount = {
      privateKey: payToKey,
      account: privateKeyToAccount(payToKey),
      address: privateKeyToAccount(payToKey).address,
    };
    await devnet.fund(payTo.address, { eth: 10n ** 18n });
    const received = new Map<string, { type: string; count: number; data: Record<string, unknown> }>();
    const receiver: Server = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk: Buffer) => {
        body += chunk.toString();
      });
      request.on("end", () => {
        const parsed = WebhookEventSchema.safeParse(JSON.parse(body || "null"));
        if (parsed.success) {
          const seen = received.get(parsed.data.id);
          if (seen === undefined)
            received.set(parsed.data.id, { type: parsed.data.type, count: 1, data: parsed.data.data });
          else seen.count += 1;
        }
        response.writeHead(parsed.success ? 200 : 400).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    stops.push(() => new Promise<void>((resolve) => receiver.close(() => resolve())));
    const { apiKey } = await registerProvider(client(), payTo.account);
    const webhook = await fetch(`${facilitatorUrls[0]}/webhooks`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook` }),
    });
    if (webhook.status !== 201 && webhook.status !== 200)
      throw new Error(`webhook registration: ${webhook.status} ${await webhook.text()}`);
    CreateWebhookResponseSchema.parse(await webhook.json());

    // A plan of the provider's.
    const planHash = await createPlan(devnet.walletClient(payTo.account), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: PLAN_PRICE,
      interval: BigInt(PLAN_INTERVAL),
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({ hash: planHash }),
    );
    const meteredHash = await createPlan(devnet.walletClient(payTo.account), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: METERED.price,
      interval: BigInt(METERED.interval),
      includedUnits: BigInt(METERED.includedUnits),
      overageUnitPrice: METERED.unitPrice,
    });
    const meteredPlanId = getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({ hash: meteredHash }),
    );
    // The provider names the facilitators' gas account its operator: usage deductions and channel claims.
    for (const hash of [
      await setOperator(devnet.walletClient(payTo.account), {
        manager: devnet.contracts.subscriptionManager,
        operator: gas.address,
        allowed: true,
      }),
      ...(devnet.contracts.channels === undefined
        ? []
        : [
            await setChannelOperator(devnet.walletClient(payTo.account), {
              channels: devnet.contracts.channels,
              operator: gas.address,
              allowed: true,
            }),
          ]),
    ])
      await devnet.publicClient.waitForTransactionReceipt({ hash });

    // Gates: one memo secret, one Redis replay namespace, every facilitator instance.
    const redisName = `tollgate-faults-${runId}`;
    const memoSecret = randomBytes(32).toString("base64url");
    const gatePorts = await Promise.all(Array.from({ length: options.gates }, () => freePort()));
    const gates = gatePorts.map((port, i) =>
      gateProcess(`gate-${i}`, {
        port,
        payTo: payTo.address,
        network: devnet.network,
        token: devnet.contracts.usd,
        facilitators: facilitatorUrls,
        memoSecret,
        redisUrl: options.redisUrl,
        redisName,
        redisPrefix: `tollgate:faults:${runId}:`,
        price: PRICE.toString(),
        slowMs: options.slowMs ?? 400,
        proofLeaseSeconds: PROOF_LEASE_SECONDS,
        apiKey,
        publicOrigin: PUBLIC_ORIGIN,
        meteredPlanId: meteredPlanId.toString(),
        channels: devnet.contracts.channels,
        channelPrice: CHANNEL_PRICE.toString(),
      }),
    );
    await Promise.all(gates.map((g) => g.start()));
    stops.push(() => Promise.all(gates.map((g) => g.stop("SIGKILL"))).then(() => {}));

    const fresh = async (count: number, usd: bigint) => {
      const accounts: DevnetAccount[] = [];
      for (let i = 0; i < count; i++) {
        const privateKey = generatePrivateKey();
        const account = privateKeyToAccount(privateKey);
        await devnet.fund(account.address, { usd });
        accounts.push({ address: account.address, privateKey, account });
      }
      return accounts;
    };
    const payers = await fresh(options.payers, 1_000_000_000n);
    const subscribers = await fresh(options.subscribers, 100n * PLAN_PRICE);
    const meteredSubscribers = await fresh(options.meteredSubscribers ?? 0, 10_000_000n);
    const channelPayers = await fresh(options.channelPayers ?? 0, 100_000_000n);
    const agents = await fresh(options.agents ?? 0, 100_000_000n);

    const redisAdmin = createClient({ url: options.redisUrl });
    redisAdmin.on("error", () => {});
    await redisAdmin.connect();
    stops.push(async () => {
      await redisAdmin.quit();
    });

    return {
      devnet,
      anvil,
      rpcProxy,
      facilitators,
      facilitatorUrls,
      gates,
      gateUrls: gatePorts.map((port) => `http://127.0.0.1:${port}`),
      database: { name, url },
      query: async <T>(sql: string, params: unknown[] = []) => (await pool.query(sql, params)).rows as T[],
      payTo,
      apiKey,
      planId,
      meteredPlanId,
      payers,
      subscribers,
      meteredSubscribers,
      channelPayers,
      agents,
      gasAddress: gas.address,
      client,
      webhooks: { received },
      faults: {
        async terminateBackends() {
          const rows = await pool.query(
            `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> 'tollgate-faults-suite'`,
            [name],
          );
          return rows.rowCount ?? 0;
        },
        async killRedisConnections() {
          const list = String(await redisAdmin.sendCommand(["CLIENT", "LIST"]));
          const ids = list
            .split("\n")
            .filter((line) => line.includes(` name=${redisName} `))
            .map((line) => /(?:^|\s)id=(\d+)/.exec(line)?.[1])
            .filter((id): id is string => id !== undefined);
          for (const id of ids) await redisAdmin.sendCommand(["CLIENT", "KILL", "ID", id]);
          return ids.length;
        },
        async restartAnvil() {
          await anvil.stop("SIGINT");
          await startEventually(anvil);
        },
        chain:
          rpcProxy === undefined
            ? undefined
            : createChainFaults({
                anvilUrl: rpcUrl,
                proxy: rpcProxy,
                gasAddress: gas.address,
                query: async <T>(sql: string, params: unknown[] = []) =>
                  (await pool.query(sql, params)).rows as T[],
              }),
      },
      stop: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}
