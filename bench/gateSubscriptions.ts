/**
 * The gate's subscription path and its metered path against an ungated route of the same Hono app,
 * in one run, as ratios.
 *
 * - subscription: `X-Tollgate-Sub` + a sub-auth token, plan without metering — token verdict from the
 *   gate's cache (one signature recovery per token, done in the warm-up), subscription state from the
 *   status cache (re-read every 5 s from the facilitator), handler.
 * - metered: the same, on a plan whose every unit is charged — plus a reservation in the in-memory
 *   usage ledger per request and the background flush of charges to `POST /usage` every 2 s.
 * - metered (PGlite / PostgreSQL / Redis, leased): the metered path with a shared usage ledger, as
 *   several instances of one API share it: allowance leased in blocks (createLeasedUsageLedger), each
 *   use persisted into its lease before the answer, the uses in flight in one write. PostgreSQL and
 *   Redis run when DATABASE_URL / REDIS_URL are set.
 *
 * Goals (printed with the measured ratios): subscription and in-memory metered paths ≥ 0.85× the
 * ungated route, in process and over a socket; shared ledgers ≥ 0.5× the in-memory metered path.
 * Each path is compared with the bare ungated route and with the ungated route sent the same headers
 * as a subscriber (what carrying them costs the server, gate or not).
 *
 * The facilitator is an in-process Hono app speaking the real wire formats (plans, subscriptions, the
 * event feed — polled every second as in production — and usage). 64 subscribers take turns, each
 * with its own token. Every answer must be a 200, or the run fails: a refusal would mean the bench
 * measured the wrong path.
 *
 * Two drivers, as in bench/gateProof.ts: in process through `app.request()` (one request at a time),
 * and over a real socket from a worker thread with keep-alive connections (`CONCURRENCY` at once).
 * Phases alternate (`ROUNDS` each) so that load from other processes falls on every route alike.
 *
 *   npx tsx bench/gateSubscriptions.ts
 */
import { Worker } from "node:worker_threads";
import { Hono } from "hono";
import { getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../src/gate/paymentGate.ts";
import type { PaymentGateOptions } from "../src/gate/paymentGateOptions.ts";
import type { FetchFn } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import type { PlanInfo, SubscriptionInfo } from "../src/protocol/subscriptions.ts";
import { createSubscriptionAuth } from "../src/schemes/subscription/client/subscriptionAuth.ts";
import { createLeasedUsageLedger } from "../src/schemes/subscription/gate/usage/createLeasedUsageLedger.ts";
import { createPostgresUsageLedger } from "../src/schemes/subscription/gate/usage/createPostgresUsageLedger.ts";
import { createRedisUsageLedger } from "../src/schemes/subscription/gate/usage/createRedisUsageLedger.ts";
import type { UsageLedger } from "../src/schemes/subscription/gate/usage/usageLedger.ts";
import { createStore } from "../src/store/createStore.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";

const ROUNDS = 3;
const IN_PROCESS_PHASE_MS = 1_000;
const SOCKET_PHASE_MS = 2_000;
const CONCURRENCY = 16;
const SUBSCRIBERS = 64;

const NETWORK = "eip155:31337" as const;
const TOKEN = getAddress("0x5fbdb2315678afecb367f032d93f642f64180aa3");
const MANAGER = getAddress("0xe7f1725e7734ce288f8367e1bb143e90bb3f0512");
const PAY_TO = getAddress("0x70997970c51812dc3a010c7d01b50e0d17dc79c8");
const ORIGIN = "https://api.bench.test";
const DAY = 86_400;

const PLANS: Record<string, PlanInfo> = {
  "1": plan("1", "0", "0"),
  "2": plan("2", "0", "1"),
};

function plan(planId: string, includedUnits: string, overageUnitPrice: string): PlanInfo {
  return {
    planId,
    provider: PAY_TO,
    token: TOKEN,
    amount: "9000000",
    interval: 30 * DAY,
    includedUnits,
    overageUnitPrice,
    deprecated: false,
    successorPlanId: null,
  };
}

// ---- the facilitator, in process ---------------------------------------------------------------

const subscribers = Array.from({ length: SUBSCRIBERS }, () => privateKeyToAccount(generatePrivateKey()));
const now = Math.floor(Date.now() / 1000);
const facilitatorCalls: Record<string, number> = {};
/** Subscription ids: 1..64 on plan 1 (unmetered), 101..164 on plan 2 (metered). */
function subscription(id: number): SubscriptionInfo | undefined {
  const planId = id > 100 ? "2" : "1";
  const owner = subscribers[(id % 100) - 1];
  if (owner === undefined) return undefined;
  return {
    subscriptionId: String(id),
    planId,
    subscriber: owner.address,
    provider: PAY_TO,
    token: TOKEN,
    amount: "9000000",
    interval: 30 * DAY,
    status: "Active",
    createdAt: now,
    periodStart: now,
    currentPeriodEnd: now + 30 * DAY,
    nextChargeAt: now + 30 * DAY,
    pausedRemaining: 0,
    maxOverage: (10n ** 30n).toString(),
    overageUsed: "0",
    chainTime: now,
  };
}
const facilitator = new Hono();
facilitator.use("*", async (c, next) => {
  const key = `${c.req.method} ${c.req.path.replace(/\/\d+$/, "/:id")}`;
  facilitatorCalls[key] = (facilitatorCalls[key] ?? 0) + 1;
  await next();
});
facilitator.get("/plans/:id", (c) => c.json(PLANS[c.req.param("id")] ?? {}));
facilitator.get("/subscriptions/:id", (c) => {
  const found = subscription(Number(c.req.param("id")));
  return found === undefined ? c.json({ error: { code: "NotFound", message: "none" } }, 404) : c.json(found);
});
facilitator.get("/events", (c) => c.json({ events: [], next: c.req.query("after") ?? "0.0" }));
facilitator.post("/usage", async (c) => {
  const { records } = (await c.req.json()) as {
    records: { subscriptionId: string; amount: string; ref: string }[];
  };
  return c.json(
    {
      accepted: records.map((r) => ({
        ...r,
        status: "pending",
        transaction: null,
        failure: null,
        duplicate: false,
      })),
    },
    202,
  );
});
facilitator.get("/usage", (c) => c.json({ records: [] }));
const facilitatorFetch: FetchFn = async (input, init) => facilitator.fetch(new Request(input, init));

// ---- the API ----------------------------------------------------------------------------------

const store = await createStore({ dataDir: "memory://" });
const pgStore =
  process.env.DATABASE_URL === undefined
    ? undefined
    : await createTestStore({ databaseUrl: process.env.DATABASE_URL });
const redisLedger =
  process.env.REDIS_URL === undefined
    ? undefined
    : await createRedisUsageLedger({
        url: process.env.REDIS_URL,
        name: `bench-${process.pid}-${Date.now()}`,
      });
/** The shared ledgers, each leased: name, route prefix, ledger. */
const sharedLedgers: { name: string; prefix: string; ledger: UsageLedger & { close(): Promise<void> } }[] = [
  {
    name: "metered (PGlite, leased)",
    prefix: "pglite",
    ledger: createLeasedUsageLedger({ shared: await createPostgresUsageLedger(store), clock: systemClock }),
  },
];
if (pgStore !== undefined) {
  sharedLedgers.push({
    name: "metered (PostgreSQL, leased)",
    prefix: "pg",
    ledger: createLeasedUsageLedger({ shared: await createPostgresUsageLedger(pgStore), clock: systemClock }),
  });
}
if (redisLedger !== undefined) {
  sharedLedgers.push({
    name: "metered (Redis, leased)",
    prefix: "redis",
    ledger: createLeasedUsageLedger({ shared: redisLedger, clock: systemClock }),
  });
}
const base = {
  payTo: PAY_TO,
  network: NETWORK,
  token: { address: TOKEN, name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.bench",
  fetch: facilitatorFetch,
  memoSecret: "a-bench-memo-secret-that-is-at-least-32-bytes",
  publicOrigin: ORIGIN,
  subscriptionManager: MANAGER,
  providerApiKey: `tg_${"b".repeat(32)}`,
  // Room for every charge of the run: only the settlement bound is being kept out of the way.
  maxUnsettledUsage: 10n ** 30n,
} satisfies Partial<PaymentGateOptions>;
const gates: (PaymentGate & PaymentGateControls)[] = [
  paymentGate({
    ...base,
    routes: {
      "GET /sub/item": { pricing: [{ type: "subscription", plan: "1" }] },
      "GET /metered/item": { pricing: [{ type: "subscription", plan: "2" }] },
    },
  }),
  ...sharedLedgers.map(({ prefix, ledger }) =>
    paymentGate({
      ...base,
      usageLedger: ledger,
      routes: { [`GET /${prefix}/item`]: { pricing: [{ type: "subscription", plan: "2" }] } },
    }),
  ),
];
let refused = 0;
let firstRefusal = "";
const app = new Hono();
for (const [prefix, gate] of [
  ["/sub/*", gates[0]!],
  ["/metered/*", gates[0]!],
  ...sharedLedgers.map(({ prefix }, i) => [`/${prefix}/*`, gates[i + 1]!] as const),
] as const) {
  app.use(prefix, async (c, next) => {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") {
      if (refused++ === 0)
        firstRefusal = `${c.req.path}: ${result.response.status} ${await result.response.clone().text()}`;
      return result.response;
    }
    await next();
  });
}
app.get("/:route/item", (c) => c.json({ item: 1, route: c.req.param("route") }));

/** Each subscriber's headers for subscription `offset + i`. */
async function headersFor(offset: number): Promise<Record<string, string>[]> {
  return Promise.all(
    subscribers.map((signer, i) =>
      createSubscriptionAuth({ signer }).headers(BigInt(offset + i + 1), ORIGIN),
    ),
  );
}
const routes = [
  { name: "ungated", path: "/free/item", headers: [{}] as Record<string, string>[] },
  // The same request as a subscriber's, to a route without a gate: what carrying the headers costs
  // (a web Request checks every header value as it is built), which is not the gate's doing.
  { name: "ungated, same headers", path: "/free/item", headers: await headersFor(0) },
  { name: "subscription", path: "/sub/item", headers: await headersFor(0) },
  { name: "metered", path: "/metered/item", headers: await headersFor(100) },
  ...(await Promise.all(
    sharedLedgers.map(async ({ name, prefix }) => ({
      name,
      path: `/${prefix}/item`,
      headers: await headersFor(100),
    })),
  )),
];

// ---- drivers -----------------------------------------------------------------------------------

/** `cpuUs`: this process's CPU time over the phase (in process only; the socket load shares it). */
type Phase = { count: number; elapsedMs: number; latenciesMs: number[]; failures: number; cpuUs?: number };

const merge = (phases: readonly Phase[]): Phase => ({
  count: phases.reduce((n, p) => n + p.count, 0),
  elapsedMs: phases.reduce((n, p) => n + p.elapsedMs, 0),
  latenciesMs: phases.flatMap((p) => p.latenciesMs),
  failures: phases.reduce((n, p) => n + p.failures, 0),
  cpuUs: phases.reduce((n, p) => n + (p.cpuUs ?? 0), 0),
});
/** CPU µs per request of merged in-process phases. */
const cpuPer = (p: Phase) => (p.cpuUs ?? 0) / p.count;
const rps = (p: Phase) => (p.count / p.elapsedMs) * 1000;

async function inProcess(
  path: string,
  headers: readonly Record<string, string>[],
  durationMs: number,
): Promise<Phase> {
  const latenciesMs: number[] = [];
  let failures = 0;
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; elapsedMs(start) < durationMs; i++) {
    const sent = process.hrtime.bigint();
    const response = await app.request(`${ORIGIN}${path}`, { headers: headers[i % headers.length] ?? {} });
    await response.arrayBuffer();
    latenciesMs.push(elapsedMs(sent));
    if (response.status !== 200) failures++;
  }
  const used = process.cpuUsage(cpu);
  return {
    count: latenciesMs.length,
    elapsedMs: elapsedMs(start),
    latenciesMs,
    failures,
    cpuUs: used.user + used.system,
  };
}

/**
 * Keep-alive load from a worker thread (plain JavaScript, so no loader is needed there): each of
 * `concurrency` connections sends its next request as soon as the previous answer arrives, cycling
 * through the header sets.
 */
const WORKER = `
const { Agent, request } = require("node:http");
const { parentPort, workerData } = require("node:worker_threads");
const { origin, path, headers, concurrency, durationMs } = workerData;
const url = new URL(path, origin);
const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
const latenciesMs = [];
let failures = 0;
let next = 0;
const start = process.hrtime.bigint();
const deadline = start + BigInt(durationMs) * 1000000n;
const once = (h) => new Promise((resolve) => {
  const req = request({ agent, hostname: url.hostname, port: url.port, path: url.pathname, method: "GET", headers: h }, (res) => {
    res.on("data", () => {});
    res.on("end", () => resolve(res.statusCode));
    res.on("error", () => resolve(0));
  });
  req.on("error", () => resolve(0));
  req.end();
});
async function connection() {
  while (process.hrtime.bigint() < deadline) {
    const sent = process.hrtime.bigint();
    const status = await once(headers[next++ % headers.length]);
    latenciesMs.push(Number(process.hrtime.bigint() - sent) / 1e6);
    if (status !== 200) failures++;
  }
}
Promise.all(Array.from({ length: concurrency }, connection)).then(() => {
  parentPort.postMessage({ count: latenciesMs.length, elapsedMs: Number(process.hrtime.bigint() - start) / 1e6, latenciesMs, failures });
  agent.destroy();
});
`;

function overSocket(
  origin: string,
  path: string,
  headers: readonly Record<string, string>[],
  durationMs: number,
): Promise<Phase> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, {
      eval: true,
      workerData: { origin, path, headers, concurrency: CONCURRENCY, durationMs },
    });
    worker.once("message", (phase: Phase) => resolve(phase));
    worker.once("error", reject);
  });
}

// ---- the run -----------------------------------------------------------------------------------

for (const route of routes) {
  const response = await app.request(`${ORIGIN}${route.path}`, { headers: route.headers[0] ?? {} });
  if (response.status !== 200) throw new Error(`${route.name}: ${response.status} ${await response.text()}`);
}
// Warm-up: JIT, plan reads, one signature recovery per token, the status cache, the ledgers.
for (const route of routes) await inProcess(route.path, route.headers, 500);

/**
 * Between phases: the gates' pending usage sent and a short pause, so that background work one route
 * left behind (lease writes, flushes; embedded PGlite's in particular) is not charged to the next.
 */
async function settle(): Promise<void> {
  for (const gate of gates) await gate.flushUsage();
  await new Promise((resolve) => setTimeout(resolve, 250));
}

const measured = new Map<string, { inProcess: Phase[]; socket: Phase[] }>(
  routes.map((r) => [r.name, { inProcess: [], socket: [] }]),
);
for (let round = 0; round < ROUNDS; round++) {
  for (const route of routes) {
    await settle();
    measured.get(route.name)!.inProcess.push(await inProcess(route.path, route.headers, IN_PROCESS_PHASE_MS));
  }
}
const server: RunningServer = await serveApp(app);
try {
  for (const route of routes) await overSocket(server.url, route.path, route.headers, 300);
  for (let round = 0; round < ROUNDS; round++) {
    for (const route of routes) {
      await settle();
      measured
        .get(route.name)!
        .socket.push(await overSocket(server.url, route.path, route.headers, SOCKET_PHASE_MS));
    }
  }
} finally {
  await server.close();
  for (const gate of gates) await gate.close();
  for (const { ledger } of sharedLedgers) await ledger.close();
  await redisLedger?.close();
  await pgStore?.close();
  await store.close();
}

const failures = [...measured.values()].reduce(
  (n, m) => n + merge(m.inProcess).failures + merge(m.socket).failures,
  0,
);
if (failures > 0 || refused > 0)
  throw new Error(`${failures} requests were not answered 200 (${refused} refused; first: ${firstRefusal})`);

const rows: string[][] = [];
for (const driver of ["inProcess", "socket"] as const) {
  const label = driver === "inProcess" ? "in process, 1 at a time" : `socket, ${CONCURRENCY} connections`;
  const free = merge(measured.get("ungated")![driver]);
  for (const route of routes) {
    const phase = merge(measured.get(route.name)![driver]);
    rows.push([
      `${label}: ${route.name}`,
      phase.count.toString(),
      fmt(rps(phase)),
      route.name === "ungated" ? "1x" : ratio(rps(phase), rps(free)),
      fmt(percentile(phase.latenciesMs, 50)),
      fmt(percentile(phase.latenciesMs, 99)),
    ]);
  }
}
console.log(
  `gate subscription and metered paths vs an ungated route (${ROUNDS} alternating rounds each; ${SUBSCRIBERS} subscribers)`,
);
console.log(table(["driver: route", "requests", "req/s", "vs ungated", "p50 ms", "p99 ms"], rows));
console.log(`facilitator calls during the run: ${JSON.stringify(facilitatorCalls)}`);
const freeInProcess = merge(measured.get("ungated")!.inProcess);
console.log();
console.log(
  "CPU time per request in process (process.cpuUsage over each phase; not disturbed by waits for a core)",
);
console.log(
  table(
    ["route", "CPU µs per request", "ungated ÷ route"],
    routes.map((route) => {
      const phase = merge(measured.get(route.name)!.inProcess);
      return [route.name, fmt(cpuPer(phase)), ratio(cpuPer(freeInProcess), cpuPer(phase))];
    }),
  ),
);

// ---- goals -------------------------------------------------------------------------------------
const goalRows: string[][] = [];
for (const driver of ["inProcess", "socket"] as const) {
  const label = driver === "inProcess" ? "in process" : "socket";
  const rate = (name: string) => rps(merge(measured.get(name)![driver]));
  const goal = (what: string, measuredRatio: number, target: number) =>
    goalRows.push([
      `${label}: ${what}`,
      `≥ ${target}x`,
      `${measuredRatio.toFixed(3)}x`,
      measuredRatio >= target ? "holds" : "MISSED",
    ]);
  for (const base of ["ungated", "ungated, same headers"]) {
    goal(`subscription vs ${base}`, rate("subscription") / rate(base), 0.85);
    goal(`metered (in-memory) vs ${base}`, rate("metered") / rate(base), 0.85);
  }
  if (driver === "inProcess") {
    const cpuOf = (name: string) => cpuPer(merge(measured.get(name)!.inProcess));
    for (const base of ["ungated", "ungated, same headers"]) {
      goal(`subscription vs ${base}, by CPU time`, cpuOf(base) / cpuOf("subscription"), 0.85);
      goal(`metered (in-memory) vs ${base}, by CPU time`, cpuOf(base) / cpuOf("metered"), 0.85);
    }
  }
  for (const { name } of sharedLedgers)
    goal(`${name} vs in-memory metered`, rate(name) / rate("metered"), 0.5);
}
console.log(table(["goal", "target", "measured", "verdict"], goalRows));
if (pgStore === undefined || redisLedger === undefined) {
  console.log("(set DATABASE_URL and REDIS_URL to measure the PostgreSQL and Redis ledgers)");
}
