/**
 * A gate in its own process for the fault suite and the soak: `paymentGate` on `node:http`, its replay
 * guard, leased usage ledger and channel voucher store in Redis (one named connection, so the suite can
 * kill exactly this process's connections; shared with the other gate processes), and its facilitator
 * client over every facilitator instance. `GET /api/item` (one-time) answers at once; `GET /api/slow`
 * waits `slowMs` in its handler (after the proof was claimed), a window for killing the gate
 * mid-request; `GET /api/metered` takes the metered plan; `GET /api/channel` takes channel vouchers,
 * forwarded to the facilitators every second. Configuration: JSON in argv[2]. Prints `listening <url>`.
 */
import { createServer } from "node:http";
import { createClient } from "redis";
import type { Address } from "viem";
import { nodePaymentGate } from "../../../src/gate/nodePaymentGate.ts";
import { paymentGate } from "../../../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../../../src/http/facilitatorClient.ts";
import { systemClock } from "../../../src/protocol/clock.ts";
import {
  createRedisVoucherStore,
  type RedisVoucherClient,
} from "../../../src/schemes/channel/gate/redisVoucherStore.ts";
import { createLeasedUsageLedger } from "../../../src/schemes/subscription/gate/usage/createLeasedUsageLedger.ts";
import {
  createRedisUsageLedger,
  type RedisUsageClient,
} from "../../../src/schemes/subscription/gate/usage/createRedisUsageLedger.ts";
import { createRedisReplayGuard, type RedisReplayClient } from "../../../src/store/createRedisReplayGuard.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as {
  port: number;
  payTo: Address;
  network: `eip155:${number}`;
  token: Address;
  facilitators: string[];
  memoSecret: string;
  redisUrl: string;
  redisName: string;
  redisPrefix: string;
  price: string;
  slowMs: number;
  proofLeaseSeconds: number;
  apiKey: string;
  publicOrigin: string;
  meteredPlanId: string;
  channels: Address;
  channelPrice: string;
};

const redis = createClient({ url: config.redisUrl, name: config.redisName });
// The client reconnects by itself after CLIENT KILL; meanwhile `consume` fails and the gate answers 5xx.
redis.on("error", () => {});
await redis.connect();
const replayGuard = await createRedisReplayGuard({
  client: redis as unknown as RedisReplayClient,
  prefix: config.redisPrefix,
});

const usageLedger = createLeasedUsageLedger({
  shared: await createRedisUsageLedger({
    client: redis as unknown as RedisUsageClient,
    prefix: `${config.redisPrefix}usage:`,
    name: "faults",
  }),
  clock: systemClock,
  leaseTtlMs: 3_000,
});
const voucherStore = await createRedisVoucherStore({
  client: redis as unknown as RedisVoucherClient,
  prefix: `${config.redisPrefix}channel:`,
});

const [primary, ...fallbackUrls] = config.facilitators;
const gate = paymentGate({
  payTo: config.payTo,
  network: config.network,
  token: { address: config.token, name: "USD Coin", version: "2" },
  facilitator: createFacilitatorClient({ url: primary!, fallbackUrls, fetch, timeoutMs: 20_000 }),
  memoSecret: config.memoSecret,
  // Offers live 90 s, not the default 300: an agent's payment whose answer was lost is held until its
  // authorization expires, and the run's end waits for that before it reconciles the budget ledgers.
  memoTtlSeconds: 90,
  replayGuard,
  // A proof taken by this gate and never answered (the suite SIGKILLs gates mid-request) comes back to
  // the payer's re-send of the same request once this lapses.
  proofLeaseSeconds: config.proofLeaseSeconds,
  providerApiKey: config.apiKey,
  publicOrigin: config.publicOrigin,
  usageLedger,
  usageFlushIntervalMs: 500,
  routes: {
    "GET /api/item": { amount: BigInt(config.price) },
    "GET /api/slow": { amount: BigInt(config.price) },
    "GET /api/metered": { pricing: [{ type: "metered", plan: config.meteredPlanId }] },
    "GET /api/channel": { pricing: [{ type: "channel", amount: BigInt(config.channelPrice) }] },
  },
  schemeOptions: {
    channel: { contract: config.channels, store: voucherStore, forwardIntervalMs: 1_000 },
  },
});

const server = createServer(
  nodePaymentGate(gate, (req, res, payment) => {
    const answer = () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ served: true, payer: payment?.payer ?? null }));
    };
    if (req.url === "/api/slow") setTimeout(answer, config.slowMs);
    else answer();
  }),
);
server.listen(config.port, "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${config.port}\n`);
});
