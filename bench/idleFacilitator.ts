/**
 * The facilitator at rest: a `tollgate facilitator` process (PGlite on disk, the dashboard on, as after
 * `tollgate devnet up`) on a devnet that mines a block every 2 seconds, with nothing to do. It measures
 * the process's CPU (from /proc), its resident memory, and the JSON-RPC calls it makes (anvil's own log
 * of the methods it serves, over HTTP and WebSocket alike), then sends one payment and measures how
 * soon the facilitator has its transaction in the node (the wake-up) and answers.
 *
 * Goals (printed with the measured values): ≤ 1% of a core, ≤ 200 MB resident, ≤ 0.5 RPC calls/s, and a
 * payment's transaction reaches the node within 500 ms of the request.
 *
 * It runs the built command line (`npm run build`, what a deployment runs: plain `node`), built afresh
 * into a directory of its own; `--source` runs the sources through tsx instead (`npm run tollgate`).
 *
 * Rest begins after a warm-up of `WARM_UP_SECONDS` (default 100): in the first ~90 s after start-up V8's
 * memory reducer runs a few full collections that shrink the heap (measured: resident 293 → 207 MB, a
 * few hundred ms of CPU at 38–88 s, then ~0.3 % of a core), which is start-up, not rest.
 *
 *   npx tsx bench/idleFacilitator.ts [--source]   (IDLE_SECONDS=60 for a longer window; default 40)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describeDevnet, writeDevnetFile } from "../src/chain/devnetFile.ts";
import { signTransferAuthorization } from "../src/chain/signers/signTransferAuthorization.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { bundleCli } from "../src/cli/bundle.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { sealMemo } from "../src/gate/memo.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { memoNonce } from "../src/protocol/memo.ts";
import { fmt, table } from "./support/stats.ts";

const BLOCK_TIME_SECONDS = 2;
const WARM_UP_MS = Number(process.env.WARM_UP_SECONDS ?? 100) * 1_000;
const IDLE_MS = Number(process.env.IDLE_SECONDS ?? 40) * 1_000;
const SAMPLE_MS = 1_000;
const CLOCK_TICKS = 100; // USER_HZ on Linux
const root = fileURLToPath(new URL("..", import.meta.url));
const FROM_SOURCE = process.argv.includes("--source");

/** anvil logs each JSON-RPC method it serves on a line of its own. */
const rpcLine = /^(eth|net|web3|anvil|evm|debug|txpool|trace|ots)_[A-Za-z]+$/;
const rpcCalls = new Map<string, number>();
let counting = false;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

/** CPU seconds (user + system) and resident bytes of a process, from /proc. */
function sample(pid: number): { cpuSeconds: number; rssBytes: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const cpuSeconds = (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return { cpuSeconds, rssBytes: rssKb * 1024 };
}

async function startFacilitatorProcess(
  devnet: Devnet,
  dir: string,
  port: number,
  entry: string[],
): Promise<ChildProcess> {
  writeDevnetFile(join(dir, "devnet.json"), describeDevnet(devnet));
  const child = spawn(process.execPath, [...entry, "facilitator", "--dir", dir, "--port", String(port)], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: "warn", TOLLGATE_PROOF_KEYS: generateProofKey().seed },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the facilitator did not start: ${output}`)), 180_000);
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("facilitator listening")) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the facilitator exited (${code}): ${output}`));
    });
  });
  return child;
}

/**
 * Where a process's resident memory is, from /proc/<pid>/smaps: the node binary's own pages, V8's heap
 * pages (256 kB mappings, every isolate's: the main thread's and the module loader thread's that tsx
 * registers), PGlite's WebAssembly memory (the one mapping of 128 MB or more: its module asks for
 * 128 MB at least, resident only where PostgreSQL touched it), and the rest (malloc, code, stacks).
 */
function residentParts(pid: number): { binary: number; v8Pages: number; wasm: number; other: number } {
  const parts = { binary: 0, v8Pages: 0, wasm: 0, other: 0 };
  let size = 0;
  let name = "";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (range !== null) {
      size = Number.parseInt(range[2]!, 16) - Number.parseInt(range[1]!, 16);
      name = range[3] ?? "";
      continue;
    }
    if (!line.startsWith("Rss:")) continue;
    const bytes = Number(line.split(/\s+/)[1]) * 1024;
    if (name === process.execPath || name.endsWith("/node")) parts.binary += bytes;
    else if (name === "" && size === 256 * 1024) parts.v8Pages += bytes;
    else if (name === "" && size >= 128 * 2 ** 20) parts.wasm += bytes;
    else parts.other += bytes;
  }
  return parts;
}

/** One payment as a gate quotes it and a payer signs it. */
async function signPayment(devnet: Devnet) {
  const payer = devnet.accounts[1]!;
  const payTo = devnet.accounts[2]!.address;
  const token = devnet.contracts.usd;
  const now = Math.floor(Date.now() / 1000);
  const memo = sealMemo(randomBytes(32), {
    m: "GET",
    p: "/paid",
    a: "10000",
    t: payTo,
    n: devnet.network,
    k: token,
    e: now + 600,
    r: base64UrlEncode(randomBytes(12)),
  });
  const authorization = {
    from: payer.address,
    to: payTo,
    value: 10_000n,
    validAfter: BigInt(now - 60),
    validBefore: BigInt(now + 600),
    nonce: memoNonce(memo),
  };
  const signature = await signTransferAuthorization(payer.account, {
    domain: {
      name: devnet.token.name,
      version: devnet.token.version,
      chainId: devnet.chain.id,
      verifyingContract: token,
    },
    authorization,
  });
  return {
    scheme: "exact",
    network: devnet.network,
    token,
    memo,
    authorization: {
      ...authorization,
      value: authorization.value.toString(),
      validAfter: authorization.validAfter.toString(),
      validBefore: authorization.validBefore.toString(),
    },
    signature,
  };
}

const devnet = await startDevnet({
  blockTime: BLOCK_TIME_SECONDS,
  accounts: 4,
  logger: {
    debug(line: string) {
      const method = line.trim();
      if (counting && rpcLine.test(method)) rpcCalls.set(method, (rpcCalls.get(method) ?? 0) + 1);
    },
  },
});
const dir = mkdtempSync(join(tmpdir(), "tollgate-idle-"));
// Inside the repository, so the build's package imports resolve from its node_modules.
const buildDir = join(root, `.tmp-idle-build-${randomBytes(4).toString("hex")}`);
let child: ChildProcess | undefined;
try {
  const port = await freePort();
  const entry = FROM_SOURCE
    ? ["--import", "tsx", join(root, "src/cli/main.ts")]
    : [await bundleCli(buildDir)];
  child = await startFacilitatorProcess(devnet, dir, port, entry);
  const pid = child.pid!;
  console.log(
    `facilitator pid ${pid} (${FROM_SOURCE ? "the sources through tsx" : "the built CLI, plain node"}), ` +
      `devnet ${devnet.rpcUrl} (${BLOCK_TIME_SECONDS} s blocks); rest measured after a ${WARM_UP_MS / 1000} s warm-up`,
  );
  // Start-up (migrations, the first index pass) is not rest.
  await new Promise((r) => setTimeout(r, WARM_UP_MS));
  counting = true;
  const first = sample(pid);
  const startedAt = performance.now();
  const rss: number[] = [];
  while (performance.now() - startedAt < IDLE_MS) {
    await new Promise((r) => setTimeout(r, SAMPLE_MS));
    rss.push(sample(pid).rssBytes);
  }
  const last = sample(pid);
  const parts = residentParts(pid);
  const seconds = (performance.now() - startedAt) / 1000;
  counting = false;
  const calls = [...rpcCalls.values()].reduce((a, b) => a + b, 0);
  const cpuShare = (last.cpuSeconds - first.cpuSeconds) / seconds;
  const rssMean = rss.reduce((a, b) => a + b, 0) / rss.length;
  const rssMax = Math.max(...rss);

  // One payment: how soon its transaction reaches the node (the pending nonce of the gas key moves).
  const gas = devnet.accounts[devnet.accounts.length - 1]!.address;
  const payment = await signPayment(devnet);
  const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas, blockTag: "pending" });
  const sent = performance.now();
  const answer = fetch(`http://127.0.0.1:${port}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment: payment }),
  }).then(async (response) => ({
    status: response.status,
    text: await response.text(),
    at: performance.now(),
  }));
  let broadcastMs = Number.NaN;
  while (performance.now() - sent < 30_000) {
    const nonce = await devnet.publicClient.getTransactionCount({ address: gas, blockTag: "pending" });
    if (nonce > nonceBefore) {
      broadcastMs = performance.now() - sent;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const answered = await answer;
  if (answered.status !== 200)
    throw new Error(`the payment was refused: ${answered.status} ${answered.text}`);
  const answerMs = answered.at - sent;

  const goals: [string, string, string, boolean][] = [
    ["CPU at rest", `${fmt(cpuShare * 100, 2)}% of a core`, "≤ 1%", cpuShare <= 0.01],
    [
      "resident memory",
      `${fmt(rssMean / 2 ** 20, 0)} MB (max ${fmt(rssMax / 2 ** 20, 0)})`,
      "≤ 200 MB",
      rssMax <= 200 * 2 ** 20,
    ],
    [
      "RPC calls at rest",
      `${fmt(calls / seconds, 3)}/s (${calls} in ${fmt(seconds, 1)} s)`,
      "≤ 0.5/s",
      calls / seconds <= 0.5,
    ],
    ["payment → transaction in the node", `${fmt(broadcastMs, 0)} ms`, "≤ 500 ms", broadcastMs <= 500],
  ];
  console.log(
    table(
      ["goal", "measured", "target", "holds"],
      goals.map(([name, value, target, holds]) => [name, value, target, holds ? "yes" : "NO"]),
    ),
  );
  const mb = (bytes: number) => `${fmt(bytes / 2 ** 20, 0)} MB`;
  console.log(
    `resident at the end of the idle window: node binary ${mb(parts.binary)}, V8 heap pages ${mb(parts.v8Pages)} ` +
      `(all isolates), PGlite's WebAssembly memory ${mb(parts.wasm)}, other (malloc, code, stacks) ${mb(parts.other)}`,
  );
  console.log(
    `RPC calls by method: ${[...rpcCalls].map(([m, n]) => `${m} ${n}`).join(", ") || "none"}; ` +
      `the payment was answered in ${fmt(answerMs, 0)} ms (its block comes within ${BLOCK_TIME_SECONDS} s)`,
  );
} finally {
  if (child !== undefined && child.exitCode === null) {
    const exited = new Promise((r) => child!.once("exit", r));
    child.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  await devnet.stop();
  rmSync(dir, { recursive: true, force: true });
  rmSync(buildDir, { recursive: true, force: true });
}
