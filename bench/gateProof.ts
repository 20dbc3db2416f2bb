/**
 * The gate's one-time proof path against an ungated route of the same Hono app, in one run.
 *
 * Gated requests each carry a distinct, valid payment proof signed with a real facilitator proof key
 * (Ed25519) over a memo sealed with the gate's secret, so every one goes through the whole accept
 * path: parse `X-PAYMENT`, memo HMAC and fields, Ed25519 verify against a pinned JWKS, consume in the
 * in-memory replay guard, handler, `X-PAYMENT-RESPONSE`. No proof is sent twice, and every gated
 * answer must be a 200: a refusal would mean the bench measured the wrong path, so it fails the run.
 *
 * Two drivers: in process through `app.request()` (one request at a time: the cost of the code path),
 * and over a real socket from a worker thread with keep-alive connections (`CONCURRENCY` at once:
 * the cost as a served API sees it, HTTP parsing included). Gated and ungated phases alternate
 * (`ROUNDS` each) so that load from other processes on a shared machine falls on both sides alike.
 *
 * Then each step of the path on its own, over the same kind of proofs (parse, memo, signed text,
 * Ed25519 verify, replay key), next to one bare Ed25519 verify; the goal is that the whole path adds at
 * most 1.3× one verify measured in the same run.
 *
 *   npx tsx bench/gateProof.ts          (node --expose-gc --import tsx … collects the minting's garbage between phases)
 *
 * It also prints the CPU time per request in process (`process.cpuUsage()` over each phase), against
 * the ungated route with and without the same `X-PAYMENT` header: on a shared machine wall time
 * counts the waits for a core, CPU time does not.
 */
import { randomBytes, verify } from "node:crypto";
import { Hono } from "hono";
import { getAddress, toHex } from "viem";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey, jwksOf, signPaymentProof } from "../src/facilitator/proofKeys.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { openMemo, sealMemo } from "../src/gate/memo.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { keccak256OfText, keccakImplementation, keccakReady } from "../src/protocol/fastKeccak.ts";
import { encodeJsonHeader, HeaderName } from "../src/protocol/header.ts";
import { proofSignedText } from "../src/schemes/exact/gate/checkPaymentProof.ts";
import { safeParsePaymentProof } from "../src/schemes/exact/gate/parsePaymentProof.ts";
import { createStaticKeyResolver } from "../src/schemes/exact/gate/proofKeyResolver.ts";
import { createMemoryReplayGuard } from "../src/store/createMemoryReplayGuard.ts";
import { runSocketLoad, type SocketLoadResult } from "./support/socketLoad.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";

const ROUNDS = 3;
const IN_PROCESS_PHASE_MS = 1_000;
const SOCKET_PHASE_MS = 2_000;
const CONCURRENCY = 16;
const WARMUP_REQUESTS = 2_000;

const NETWORK = "eip155:31337" as const;
const TOKEN = getAddress("0x5fbdb2315678afecb367f032d93f642f64180aa3");
const PAY_TO = getAddress("0x70997970c51812dc3a010c7d01b50e0d17dc79c8");
const PAYER = getAddress("0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc");
const PRICE = 10_000n;
const GATED_PATH = "/paid/item";
const FREE_PATH = "/free/item";

const { key } = generateProofKey();
const memoSecret = randomBytes(32);
let facilitatorCalls = 0;

const gate = paymentGate({
  payTo: PAY_TO,
  network: NETWORK,
  // The EIP-712 domain is given and the JWKS pinned, so the gate never asks the facilitator anything.
  token: { address: TOKEN, name: "USD Coin", version: "2" },
  facilitator: "http://127.0.0.1:9",
  fetch: async () => {
    facilitatorCalls++;
    throw new Error("the proof path must not call the facilitator");
  },
  proofKeys: jwksOf([key]),
  memoSecret,
  routes: { [`GET ${GATED_PATH}`]: { amount: PRICE } },
  // Room for every proof of the run: the default guard holds 100 000 live memos.
  replayGuard: createMemoryReplayGuard({ clock: systemClock, maxEntries: 5_000_000 }),
});

const app = new Hono<PaymentGateEnv>();
app.use("/paid/*", honoPaymentGate(gate));
app.get(GATED_PATH, (c) => c.json({ item: 1, paidBy: c.get("payment")?.payer }));
app.get(FREE_PATH, (c) => c.json({ item: 1, paidBy: undefined }));

/** `count` fresh `X-PAYMENT` values, each a valid proof for its own memo, as a facilitator signs them. */
function mintPayments(count: number): string[] {
  const now = Math.floor(Date.now() / 1000);
  const headers: string[] = [];
  for (let i = 0; i < count; i++) {
    const memo = sealMemo(memoSecret, {
      m: "GET",
      p: GATED_PATH,
      a: PRICE.toString(),
      t: PAY_TO,
      n: NETWORK,
      k: TOKEN,
      e: now + 3_600,
      r: base64UrlEncode(randomBytes(12)),
    });
    const proof = signPaymentProof(key, {
      v: "1",
      scheme: "exact",
      network: NETWORK,
      token: TOKEN,
      amount: PRICE.toString(),
      payer: PAYER,
      payTo: PAY_TO,
      memo,
      tx: toHex(randomBytes(32)),
      iat: now,
      exp: now + 3_000,
    });
    headers.push(encodeJsonHeader(proof));
  }
  return headers;
}

/** `cpuUs`: CPU time of this process over the phase (in process only; the socket load shares it). */
type Phase = { count: number; elapsedMs: number; latenciesMs: number[]; failures: number; cpuUs?: number };

const merge = (phases: readonly Phase[]): Phase => ({
  count: phases.reduce((n, p) => n + p.count, 0),
  elapsedMs: phases.reduce((n, p) => n + p.elapsedMs, 0),
  latenciesMs: phases.flatMap((p) => p.latenciesMs),
  failures: phases.reduce((n, p) => n + p.failures, 0),
  cpuUs: phases.reduce((n, p) => n + (p.cpuUs ?? 0), 0),
});

const cpuSince = (start: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(start);
  return used.user + used.system;
};

/**
 * Sequential `app.request()` calls for `durationMs`, or until `payments` run out. `payments` go in
 * `X-PAYMENT`, also on the ungated route when given (to weigh the header itself).
 */
async function inProcess(path: string, durationMs: number, payments?: readonly string[]): Promise<Phase> {
  const latenciesMs: number[] = [];
  let failures = 0;
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; elapsedMs(start) < durationMs; i++) {
    let init: RequestInit | undefined;
    if (payments !== undefined) {
      const payment = payments[i];
      if (payment === undefined) break;
      init = { headers: { [HeaderName.Payment]: payment } };
    }
    const sent = process.hrtime.bigint();
    const response = await app.request(path, init);
    await response.arrayBuffer();
    latenciesMs.push(elapsedMs(sent));
    if (response.status !== 200) failures++;
  }
  return {
    count: latenciesMs.length,
    elapsedMs: elapsedMs(start),
    latenciesMs,
    failures,
    cpuUs: cpuSince(cpu),
  };
}

const fromSocket = (result: SocketLoadResult): Phase => ({
  count: result.count,
  elapsedMs: result.elapsedMs,
  latenciesMs: result.latenciesMs,
  failures: result.count - (result.statuses[200] ?? 0),
});

/** Enough proofs for a phase at the rate seen so far, with headroom; a phase that runs out stops early. */
const poolFor = (rps: number, durationMs: number) => Math.ceil((rps * durationMs * 1.5) / 1000) + 500;

const rps = (p: Phase) => (p.count / p.elapsedMs) * 1000;

// The memo's keccak runs on WebAssembly once compiled (fastKeccak.ts); measure that, not its fallback.
await keccakReady;
if (keccakImplementation() !== "wasm") throw new Error("the WebAssembly keccak did not load");

// Warm-up: JIT, the key cache, the route matcher; also the first estimate of the gated rate.
const warm = await inProcess(GATED_PATH, Number.POSITIVE_INFINITY, mintPayments(WARMUP_REQUESTS));
await inProcess(FREE_PATH, 500);
if (warm.failures > 0) throw new Error(`${warm.failures} warm-up proofs were refused`);
let gatedRate = rps(warm);

const inProcessGated: Phase[] = [];
const inProcessFree: Phase[] = [];
const inProcessFreeWithHeader: Phase[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const payments = mintPayments(poolFor(gatedRate, IN_PROCESS_PHASE_MS));
  // The minting's garbage is collected now, not in the next timed phase (when run with --expose-gc).
  (globalThis as { gc?: () => void }).gc?.();
  const gated = await inProcess(GATED_PATH, IN_PROCESS_PHASE_MS, payments);
  inProcessGated.push(gated);
  gatedRate = Math.max(gatedRate, rps(gated));
  inProcessFree.push(await inProcess(FREE_PATH, IN_PROCESS_PHASE_MS));
  inProcessFreeWithHeader.push(await inProcess(FREE_PATH, IN_PROCESS_PHASE_MS, payments));
}

const server: RunningServer = await serveApp(app);
const socketGated: Phase[] = [];
const socketFree: Phase[] = [];
try {
  // Warm the server's sockets and parser before measuring.
  await runSocketLoad({ origin: server.url, path: FREE_PATH, concurrency: CONCURRENCY, durationMs: 300 });
  let socketRate = gatedRate / 2;
  for (let round = 0; round < ROUNDS; round++) {
    const values = mintPayments(poolFor(socketRate, SOCKET_PHASE_MS));
    const gated = fromSocket(
      await runSocketLoad({
        origin: server.url,
        path: GATED_PATH,
        concurrency: CONCURRENCY,
        durationMs: SOCKET_PHASE_MS,
        header: { name: HeaderName.Payment, values },
      }),
    );
    socketGated.push(gated);
    socketRate = Math.max(socketRate, rps(gated));
    socketFree.push(
      fromSocket(
        await runSocketLoad({
          origin: server.url,
          path: FREE_PATH,
          concurrency: CONCURRENCY,
          durationMs: SOCKET_PHASE_MS,
        }),
      ),
    );
  }
} finally {
  await server.close();
}

const results = [
  { driver: "in process, 1 at a time", gated: merge(inProcessGated), free: merge(inProcessFree) },
  { driver: `socket, ${CONCURRENCY} connections`, gated: merge(socketGated), free: merge(socketFree) },
];
const failed = results.reduce((n, r) => n + r.gated.failures + r.free.failures, 0);
if (failed > 0 || facilitatorCalls > 0) {
  throw new Error(`${failed} requests were not answered 200; ${facilitatorCalls} facilitator calls`);
}

const rows: string[][] = [];
for (const { driver, gated, free } of results) {
  for (const [route, phase] of [
    ["gated (proof)", gated],
    ["ungated", free],
  ] as const) {
    rows.push([
      `${driver}: ${route}`,
      phase.count.toString(),
      fmt(rps(phase)),
      fmt(percentile(phase.latenciesMs, 50)),
      fmt(percentile(phase.latenciesMs, 99)),
    ]);
  }
  rows.push([
    `${driver}: gated / ungated`,
    "",
    ratio(rps(gated), rps(free)),
    ratio(percentile(gated.latenciesMs, 50), percentile(free.latenciesMs, 50)),
    ratio(percentile(gated.latenciesMs, 99), percentile(free.latenciesMs, 99)),
  ]);
}

console.log(
  `gate one-time proof path vs an ungated route (${ROUNDS} alternating rounds each; every proof distinct and valid)`,
);
console.log(table(["driver: route", "requests", "req/s", "p50 ms", "p99 ms"], rows));
for (const { driver, gated, free } of results) {
  // 1 / rate is the time one request takes (in process, one at a time) or occupies the saturated
  // server (socket): the difference is what the proof path costs per request.
  const addedUs = (1 / rps(gated) - 1 / rps(free)) * 1e6;
  console.log(`${driver}: the proof path adds ${fmt(addedUs)} µs per request`);
}

// Each step alone, over fresh proofs: where the time goes.
const STEP_SAMPLES = 20_000;
const headers = mintPayments(STEP_SAMPLES);
const proofs = headers.map((h) => {
  const parsed = safeParsePaymentProof(h);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.proof;
});
const publicKey = (await createStaticKeyResolver(jwksOf([key])).resolve(key.kid))!;
const messages = proofs.map((p) => Buffer.from(proofSignedText(p), "utf8"));
const signatures = proofs.map((p) => Buffer.from(p.sig, "base64url"));

/** Microseconds per call of `step(i)` over the samples, best of 3 passes (the least disturbed). */
function stepUs(step: (i: number) => unknown, cpu?: { us: number }): number {
  let best = Number.POSITIVE_INFINITY;
  for (let pass = 0; pass < 3; pass++) {
    const used = process.cpuUsage();
    const start = process.hrtime.bigint();
    for (let i = 0; i < STEP_SAMPLES; i++) step(i);
    const us = (elapsedMs(start) * 1000) / STEP_SAMPLES;
    if (cpu !== undefined) cpu.us = Math.min(cpu.us, cpuSince(used) / STEP_SAMPLES);
    best = Math.min(best, us);
  }
  return best;
}
const verifyCpu = { us: Number.POSITIVE_INFINITY };
const verifyUs = stepUs((i) => {
  if (!verify(null, messages[i]!, publicKey, signatures[i]!)) throw new Error("verify failed");
}, verifyCpu);
const steps: [string, number][] = [
  ["parse X-PAYMENT (base64, JSON, fast checks)", stepUs((i) => safeParsePaymentProof(headers[i]))],
  ["open memo (HMAC, payload checks)", stepUs((i) => openMemo(memoSecret, proofs[i]!.memo))],
  ["signed text (canonical JSON, UTF-8)", stepUs((i) => Buffer.from(proofSignedText(proofs[i]!), "utf8"))],
  ["Ed25519 verify (imported key)", verifyUs],
  ["replay key (keccak256 of the memo, WebAssembly)", stepUs((i) => keccak256OfText(proofs[i]!.memo))],
];
console.log();
console.log(`steps of the proof path, each alone (${STEP_SAMPLES} distinct proofs, best of 3)`);
console.log(
  table(
    ["step", "µs per call"],
    steps.map(([name, us]) => [name, fmt(us)]),
  ),
);
console.log(`  sum of the steps: ${fmt(steps.reduce((n, [, us]) => n + us, 0))} µs`);

// CPU time per request in process: what the path costs this process, whatever else the machine runs
// (wall time on a shared machine counts the waits for a core too).
const cpuPerRequest = (phases: readonly Phase[]) => {
  const merged = merge(phases);
  return (merged.cpuUs ?? 0) / merged.count;
};
const gatedCpu = cpuPerRequest(inProcessGated);
const freeCpu = cpuPerRequest(inProcessFree);
const freeHeaderCpu = cpuPerRequest(inProcessFreeWithHeader);
console.log();
console.log("CPU time per request, in process (process.cpuUsage over each phase)");
console.log(
  table(
    ["route", "CPU µs per request"],
    [
      ["gated (proof)", fmt(gatedCpu)],
      ["ungated", fmt(freeCpu)],
      ["ungated, same X-PAYMENT header sent", fmt(freeHeaderCpu)],
      ["one Ed25519 verify (CPU, best pass)", fmt(verifyCpu.us)],
    ],
  ),
);

console.log();
console.log("goal: the proof path adds ≤ 1.3x one Ed25519 verify measured in this run");
for (const { driver, gated, free } of results) {
  const addedUs = (1 / rps(gated) - 1 / rps(free)) * 1e6;
  const r = addedUs / verifyUs;
  console.log(
    `  ${driver}, wall: ${fmt(addedUs)} µs added / ${fmt(verifyUs)} µs verify = ${fmt(r)}x (${r <= 1.3 ? "holds" : "MISSES"})`,
  );
}
for (const [what, base] of [
  ["ungated", freeCpu],
  ["ungated with the same header (the header's transport is not the gate's)", freeHeaderCpu],
] as const) {
  const added = gatedCpu - base;
  const r = added / verifyCpu.us;
  console.log(
    `  in process, CPU, against ${what}: ${fmt(added)} µs added / ${fmt(verifyCpu.us)} µs verify = ${fmt(r)}x (${r <= 1.3 ? "holds" : "MISSES"})`,
  );
}
