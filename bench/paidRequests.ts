/**
 * Full paid requests (402 → pay → 200) through Tollgate and through the x402 reference stack, side by
 * side on the same devnet in the same run: 1, 8 and 32 concurrent payers (each a distinct funded
 * account paying one request after another), on a chain that mines each transaction at once
 * (automine) and on one with 2-second blocks.
 *
 * Per cell: latency percentiles of successful paid requests, paid requests per second, transactions
 * per payment (the facilitator gas account's nonce before and after: every transaction it sent,
 * reverted ones included), JSON-RPC calls per payment (counted in the facilitator's viem transport;
 * nothing else in either stack talks to the chain), CPU time of this process per payment (less
 * sensitive to a busy machine than wall time; anvil's work is not in it), and failures with reasons.
 *
 * Tollgate: Hono API behind `paymentGate`, `fetchWithPayment` + `createPayer`, facilitator with an
 * in-memory PGlite store (PostgreSQL when `DATABASE_URL` is set). x402: see bench/support/x402Stack.ts. Everything but anvil runs in this one
 * process, so both stacks pay for their clients' and servers' CPU alike. Cells alternate between the
 * two stacks.
 *
 *   npx tsx bench/paidRequests.ts
 */
import { type Address, getAddress } from "viem";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { createRpcCounter } from "./support/rpcCounter.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";
import { type PaidStack, startTollgateStack } from "./support/tollgateStack.ts";
import { startX402Stack } from "./support/x402Stack.ts";

const CONCURRENCY = [1, 8, 32] as const;
const MAX_PAYERS = Math.max(...CONCURRENCY);
const PRICE = 10_000n; // 0.01 USDC
const PATH = "/api/item";
const IDLE_MS = 2_000;
/** Tollgate's facilitator store: a throwaway schema of this PostgreSQL when set, else in-memory PGlite. */
const DATABASE_URL = process.env.DATABASE_URL || undefined;

type Mode = {
  name: string;
  blockTime: number | undefined;
  /** Each payer keeps paying until this much time has passed… */
  budgetMs: number;
  /** …and has paid at least this many times. */
  minRounds: number;
};

const MODES: readonly Mode[] = [
  { name: "automine", blockTime: undefined, budgetMs: 3_000, minRounds: 1 },
  { name: "2 s blocks", blockTime: 2, budgetMs: 6_000, minRounds: 3 },
];

type Cell = {
  stack: string;
  concurrency: number;
  latenciesMs: number[];
  ok: number;
  failed: number;
  elapsedMs: number;
  transactions: number;
  rpcCalls: number;
  rpcByMethod: [string, number][];
  /** CPU time of this whole process (clients, APIs, facilitators; not anvil), in milliseconds. */
  cpuMs: number;
  failures: Map<string, number>;
};

/** Why a paid request failed, in words short enough for a table. */
async function failureOf(response: Response): Promise<string> {
  const x402 = response.headers.get("payment-response") ?? response.headers.get("payment-required");
  if (x402 !== null) {
    try {
      const decoded = JSON.parse(Buffer.from(x402, "base64").toString("utf8")) as {
        error?: string;
        errorReason?: string;
      };
      const reason = decoded.errorReason ?? decoded.error;
      if (reason !== undefined) return `HTTP ${response.status} ${reason}`;
    } catch {
      // Not an x402 header after all: fall through to the status.
    }
  }
  return `HTTP ${response.status}`;
}

async function runCell(devnet: Devnet, stack: PaidStack, mode: Mode, concurrency: number): Promise<Cell> {
  const rpc = stack.rpc;
  const failures = new Map<string, number>();
  const fail = (reason: string) => failures.set(reason, (failures.get(reason) ?? 0) + 1);
  const latenciesMs: number[] = [];
  let failed = 0;
  stack.facilitatorFailures().clear();
  const nonceBefore = await devnet.publicClient.getTransactionCount({ address: stack.gasAddress });
  rpc.reset();

  const cpuBefore = process.cpuUsage();
  const start = process.hrtime.bigint();
  const payer = async (index: number) => {
    const paidFetch = stack.payingFetch(index);
    for (let round = 0; round < mode.minRounds || elapsedMs(start) < mode.budgetMs; round++) {
      const sent = process.hrtime.bigint();
      try {
        const response = await paidFetch(stack.url);
        const body = await response.text();
        if (response.status === 200 && body.includes('"item":1')) {
          latenciesMs.push(elapsedMs(sent));
          continue;
        }
        fail(await failureOf(response));
      } catch (error) {
        fail(
          error instanceof TollgateError
            ? error.code
            : ((error as Error).message.split("\n")[0]?.slice(0, 60) ?? "error"),
        );
      }
      failed++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => payer(i)));
  const elapsed = elapsedMs(start);
  const cpu = process.cpuUsage(cpuBefore);

  const rpcCalls = rpc.total;
  const rpcByMethod = rpc.byMethod();
  const nonceAfter = await devnet.publicClient.getTransactionCount({ address: stack.gasAddress });
  for (const [reason, count] of stack.facilitatorFailures()) failures.set(`facilitator: ${reason}`, count);
  return {
    stack: stack.name,
    concurrency,
    latenciesMs,
    ok: latenciesMs.length,
    failed,
    elapsedMs: elapsed,
    transactions: nonceAfter - nonceBefore,
    rpcCalls,
    rpcByMethod,
    cpuMs: (cpu.user + cpu.system) / 1000,
    failures,
  };
}

const perPayment = (n: number, cell: Cell) => (cell.ok === 0 ? Number.NaN : n / cell.ok);
const paidPerSecond = (cell: Cell) => (cell.ok / cell.elapsedMs) * 1000;
const failureRate = (cell: Cell) => cell.failed / (cell.ok + cell.failed);

function report(mode: Mode, cells: readonly Cell[]): string {
  const lines: string[] = [];
  const rows: string[][] = [];
  for (const concurrency of CONCURRENCY) {
    const t = cells.find((c) => c.stack === "Tollgate" && c.concurrency === concurrency)!;
    const x = cells.find((c) => c.stack === "x402" && c.concurrency === concurrency)!;
    for (const cell of [t, x]) {
      rows.push([
        `${concurrency} ${cell.stack}`,
        `${cell.ok}/${cell.ok + cell.failed}`,
        fmt(percentile(cell.latenciesMs, 50)),
        fmt(percentile(cell.latenciesMs, 90)),
        fmt(percentile(cell.latenciesMs, 99)),
        fmt(paidPerSecond(cell)),
        fmt(perPayment(cell.transactions, cell)),
        fmt(perPayment(cell.rpcCalls, cell)),
        fmt(perPayment(cell.cpuMs, cell)),
        `${fmt(failureRate(cell) * 100)}%`,
      ]);
    }
    rows.push([
      `${concurrency} Tollgate/x402`,
      "",
      ratio(percentile(t.latenciesMs, 50), percentile(x.latenciesMs, 50)),
      ratio(percentile(t.latenciesMs, 90), percentile(x.latenciesMs, 90)),
      ratio(percentile(t.latenciesMs, 99), percentile(x.latenciesMs, 99)),
      ratio(paidPerSecond(t), paidPerSecond(x)),
      ratio(perPayment(t.transactions, t), perPayment(x.transactions, x)),
      ratio(perPayment(t.rpcCalls, t), perPayment(x.rpcCalls, x)),
      ratio(perPayment(t.cpuMs, t), perPayment(x.cpuMs, x)),
      "",
    ]);
  }
  lines.push(
    `paid requests, ${mode.name} (each payer: at least ${mode.minRounds} paid request(s) and ${mode.budgetMs / 1000} s)`,
  );
  lines.push(
    table(
      [
        "payers stack",
        "paid/sent",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "paid/s",
        "tx/pay",
        "rpc/pay",
        "cpu ms/pay",
        "failed",
      ],
      rows,
    ),
  );
  const detail: string[] = [];
  for (const cell of cells) {
    const methods = cell.rpcByMethod.map(([m, n]) => `${m} ${fmt(perPayment(n, cell))}`).join(", ");
    detail.push(`  ${cell.concurrency} ${cell.stack}: rpc per payment: ${methods || "none"}`);
    for (const [reason, count] of cell.failures)
      detail.push(`  ${cell.concurrency} ${cell.stack}: ${count}× ${reason}`);
  }
  lines.push(detail.join("\n"));
  return lines.join("\n");
}

async function runMode(mode: Mode): Promise<string> {
  // Accounts: 0 deployer, 1 Tollgate's gas, 2 x402's gas, then payers for each stack. All hold test USD.
  const devnet = await startDevnet({ accounts: 3 + 2 * MAX_PAYERS, blockTime: mode.blockTime });
  const stacks: PaidStack[] = [];
  try {
    const common = { devnet, price: PRICE, path: PATH };
    const payTo = (n: number): Address => getAddress(`0x${n.toString(16).padStart(40, "0")}`);
    const tollgate = await startTollgateStack({
      ...common,
      gas: devnet.accounts[1]!,
      payers: devnet.accounts.slice(3, 3 + MAX_PAYERS),
      payTo: payTo(0x7011),
      rpc: createRpcCounter(),
      databaseUrl: DATABASE_URL,
    });
    stacks.push(tollgate);
    const x402 = await startX402Stack({
      ...common,
      gas: devnet.accounts[2]!,
      payers: devnet.accounts.slice(3 + MAX_PAYERS),
      payTo: payTo(0x402),
      rpc: createRpcCounter(),
    });
    stacks.push(x402);

    // Warm-up, not measured: each stack's one-time lookups (JWKS, /supported) and the JIT.
    for (const stack of stacks) {
      const response = await stack.payingFetch(0)(stack.url);
      if (response.status !== 200) throw new Error(`${stack.name} warm-up answered ${response.status}`);
      await response.text();
    }
    // What the process burns with both stacks up and no payments (timers, polling loops), for reading
    // the CPU column: a slow cell carries more of it per payment.
    const idleBefore = process.cpuUsage();
    const idleStart = process.hrtime.bigint();
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const idle = process.cpuUsage(idleBefore);
    const idleCpuMsPerSecond = ((idle.user + idle.system) / 1000 / elapsedMs(idleStart)) * 1000;

    const cells: Cell[] = [];
    for (const concurrency of CONCURRENCY) {
      // Alternate which stack goes first, so drift in the machine's load does not favour one.
      const order = concurrency === 8 ? [x402, tollgate] : [tollgate, x402];
      for (const stack of order) cells.push(await runCell(devnet, stack, mode, concurrency));
    }
    return `${report(mode, cells)}\n  idle CPU of this process, both stacks up: ${fmt(idleCpuMsPerSecond)} ms per second`;
  } finally {
    for (const stack of stacks.reverse()) await stack.stop();
    await devnet.stop();
  }
}

console.log(
  `Tollgate facilitator store: ${DATABASE_URL === undefined ? "PGlite in memory" : "PostgreSQL (DATABASE_URL)"}; price ${PRICE} (0.01 USDC); viem polls every 50 ms in both facilitators`,
);
for (const mode of MODES) {
  console.log(await runMode(mode));
  console.log();
}
