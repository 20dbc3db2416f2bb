/**
 * Full paid requests (402 → pay → 200) through Tollgate and through the x402 reference stack, side by
 * side on the same devnet in the same run: 1, 8 and 32 concurrent payers (each a distinct funded
 * account paying one request after another) on a chain that mines each transaction at once
 * (automine), and 1, 8, 32, 128 and 512 payers on one with 2-second blocks. Both stacks settle in the
 * same token, Circle's FiatToken v2.2 (USDC), at the same address; each mode prints it.
 *
 * Two wirings of the x402 reference: the way its examples wire it ("x402"), and its strongest wiring
 * ("x402+nm": the facilitator's account with viem's `nonceManager`, so concurrent settlements do not
 * race for one nonce). Tollgate's goals are stated against the strongest one, in the same run.
 *
 * Per cell: latency percentiles of successful paid requests, paid requests per second, transactions
 * per payment (the facilitator gas account's nonce before and after: every transaction it sent,
 * reverted ones included), JSON-RPC calls per payment (counted in the facilitator's viem transport;
 * nothing else in either stack talks to the chain), CPU time per payment of the servers (this process)
 * and of the payers (their own process), and failures with reasons.
 *
 * Tollgate: Hono API behind `paymentGate`, `fetchWithPayment` + `createPayer`, facilitator with an
 * in-memory PGlite store (PostgreSQL when `DATABASE_URL` is set). x402: see bench/support/x402Stack.ts.
 * The stacks' APIs and facilitators run in this process, their payers in a payer process of their own
 * (payerProcess.ts), so that the clients' signing does not share a thread with the servers it measures;
 * `--one-process` puts the payers back in this process. Only anvil is outside both. The order of the
 * stacks rotates from cell to cell.
 *
 *   npx tsx bench/paidRequests.ts            # the full run
 *   npx tsx bench/paidRequests.ts --quick    # a smoke run: 1 and 8 payers automine, 128 on 2 s blocks
 *   npx tsx bench/paidRequests.ts --one-process   # payers in the bench process, as earlier runs had them
 */
import { type Address, getAddress } from "viem";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { type BenchToken, benchToken, describeBenchToken } from "./support/benchToken.ts";
import { runPayers } from "./support/payerLoop.ts";
import { type PayerProcess, startPayerProcess } from "./support/payerProcess.ts";
import { createRpcCounter } from "./support/rpcCounter.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";
import { type PaidStack, startTollgateStack } from "./support/tollgateStack.ts";
import { startX402Stack } from "./support/x402Stack.ts";

const QUICK = process.argv.includes("--quick");
/** Payers in this process, as before payer processes: both stacks then share one thread with their clients. */
const ONE_PROCESS = process.argv.includes("--one-process");
const PRICE = 10_000n; // 0.01 USDC
const PATH = "/api/item";
const IDLE_MS = 2_000;
/** Tollgate's facilitator store: a throwaway schema of this PostgreSQL when set, else in-memory PGlite. */
const DATABASE_URL = process.env.DATABASE_URL || undefined;

type Mode = {
  name: string;
  blockTime: number | undefined;
  /** Concurrent payers per cell. */
  concurrency: readonly number[];
  /** Each payer keeps paying until this much time has passed… */
  budgetMs: number;
  /** …and has paid at least this many times. */
  minRounds: number;
};

const MODES: readonly Mode[] = QUICK
  ? [
      { name: "automine", blockTime: undefined, concurrency: [1, 8], budgetMs: 1_500, minRounds: 1 },
      { name: "2 s blocks", blockTime: 2, concurrency: [128], budgetMs: 2_000, minRounds: 1 },
    ]
  : [
      { name: "automine", blockTime: undefined, concurrency: [1, 8, 32], budgetMs: 3_000, minRounds: 1 },
      { name: "2 s blocks", blockTime: 2, concurrency: [1, 8, 32, 128, 512], budgetMs: 6_000, minRounds: 3 },
    ];

type Cell = {
  mode: string;
  stack: string;
  concurrency: number;
  latenciesMs: number[];
  ok: number;
  failed: number;
  elapsedMs: number;
  transactions: number;
  rpcCalls: number;
  rpcByMethod: [string, number][];
  /**
   * CPU time of the bench process in milliseconds: the stacks' APIs and facilitators (not anvil), and
   * with `--one-process` their paying clients too.
   */
  cpuMs: number;
  /** CPU time of the payer process during the cell (its clients' signing and HTTP), when apart. */
  payerCpuMs: number | undefined;
  failures: Map<string, number>;
};

async function runCell(
  devnet: Devnet,
  stack: PaidStack,
  mode: Mode,
  concurrency: number,
  payers: PayerProcess | undefined,
): Promise<Cell> {
  const rpc = stack.rpc;
  stack.facilitatorFailures().clear();
  const nonceBefore = await devnet.publicClient.getTransactionCount({ address: stack.gasAddress });
  rpc.reset();

  const cpuBefore = process.cpuUsage();
  const options = { url: stack.url, concurrency, budgetMs: mode.budgetMs, minRounds: mode.minRounds };
  const run =
    payers === undefined
      ? await runPayers((i) => stack.payingFetch(i), options)
      : await payers.run(stack.name, options);
  const cpu = process.cpuUsage(cpuBefore);

  const rpcCalls = rpc.total;
  const rpcByMethod = rpc.byMethod();
  const nonceAfter = await devnet.publicClient.getTransactionCount({ address: stack.gasAddress });
  const failures = new Map(run.failures);
  for (const [reason, count] of stack.facilitatorFailures()) failures.set(`facilitator: ${reason}`, count);
  return {
    mode: mode.name,
    stack: stack.name,
    concurrency,
    latenciesMs: run.latenciesMs,
    ok: run.latenciesMs.length,
    failed: run.failed,
    elapsedMs: run.elapsedMs,
    transactions: nonceAfter - nonceBefore,
    rpcCalls,
    rpcByMethod,
    cpuMs: (cpu.user + cpu.system) / 1000,
    payerCpuMs: payers === undefined ? undefined : run.cpuMs,
    failures,
  };
}

const perPayment = (n: number, cell: Cell) => (cell.ok === 0 ? Number.NaN : n / cell.ok);
const paidPerSecond = (cell: Cell) => (cell.ok / cell.elapsedMs) * 1000;
const failureRate = (cell: Cell) => cell.failed / (cell.ok + cell.failed);

const STACKS = ["Tollgate", "x402+nm", "x402"] as const;
/** The reference Tollgate's goals are stated against: x402 with viem's nonceManager. */
const REFERENCE = "x402+nm";

function report(mode: Mode, token: BenchToken, cells: readonly Cell[]): string {
  const lines: string[] = [];
  const rows: string[][] = [];
  for (const concurrency of mode.concurrency) {
    const of = (stack: string) => cells.find((c) => c.stack === stack && c.concurrency === concurrency)!;
    for (const name of STACKS) {
      const cell = of(name);
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
        cell.payerCpuMs === undefined ? "-" : fmt(perPayment(cell.payerCpuMs, cell)),
        `${fmt(failureRate(cell) * 100)}%`,
      ]);
    }
    for (const reference of ["x402+nm", "x402"]) {
      const t = of("Tollgate");
      const x = of(reference);
      rows.push([
        `${concurrency} Tollgate/${reference}`,
        "",
        ratio(percentile(t.latenciesMs, 50), percentile(x.latenciesMs, 50)),
        ratio(percentile(t.latenciesMs, 90), percentile(x.latenciesMs, 90)),
        ratio(percentile(t.latenciesMs, 99), percentile(x.latenciesMs, 99)),
        ratio(paidPerSecond(t), paidPerSecond(x)),
        ratio(perPayment(t.transactions, t), perPayment(x.transactions, x)),
        ratio(perPayment(t.rpcCalls, t), perPayment(x.rpcCalls, x)),
        ratio(perPayment(t.cpuMs, t), perPayment(x.cpuMs, x)),
        t.payerCpuMs === undefined || x.payerCpuMs === undefined
          ? ""
          : ratio(perPayment(t.payerCpuMs, t), perPayment(x.payerCpuMs, x)),
        "",
      ]);
    }
  }
  lines.push(
    `paid requests, ${mode.name} (each payer: at least ${mode.minRounds} paid request(s) and ${mode.budgetMs / 1000} s)`,
  );
  lines.push(`  ${describeBenchToken(token)} (every stack)`);
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
        ONE_PROCESS ? "cpu ms/pay" : "server cpu ms/pay",
        "payer cpu ms/pay",
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

/** Tollgate's goals against the nonce-managed reference, each with its measured ratio and verdict. */
function goals(cells: readonly Cell[]): string {
  const find = (mode: string, stack: string, concurrency: number) =>
    cells.find((c) => c.mode === mode && c.stack === stack && c.concurrency === concurrency);
  const lines: string[] = [`goals (Tollgate against ${REFERENCE}, same run)`];
  const verdict = (holds: boolean | undefined) =>
    holds === undefined ? "not measured" : holds ? "holds" : "MISSES";
  const relative = (
    goal: string,
    mode: string,
    concurrency: number,
    measure: (cell: Cell) => number,
    holds: (r: number) => boolean,
  ) => {
    const t = find(mode, "Tollgate", concurrency);
    const x = find(mode, REFERENCE, concurrency);
    const r = t === undefined || x === undefined ? Number.NaN : measure(t) / measure(x);
    lines.push(
      `  ${goal}: ${Number.isFinite(r) ? `${fmt(r)}x` : "-"} (${Number.isFinite(r) ? verdict(holds(r)) : "not measured"})`,
    );
  };
  relative(
    "single-payer p50 latency ≤ 1.0x, automine",
    "automine",
    1,
    (c) => percentile(c.latenciesMs, 50),
    (r) => r <= 1,
  );
  relative("paid requests/s ≥ 2x at 8 payers, automine", "automine", 8, paidPerSecond, (r) => r >= 2);
  relative("paid requests/s ≥ 3x at 512 payers, 2 s blocks", "2 s blocks", 512, paidPerSecond, (r) => r >= 3);
  const tollgate = cells.filter((c) => c.stack === "Tollgate");
  const failures = tollgate.reduce((n, c) => n + c.failed, 0);
  lines.push(`  0 failures in every Tollgate cell: ${failures} (${verdict(failures === 0)})`);
  // Per-payment costs where they matter: the most loaded cell on 2-second blocks (automine mines every
  // transaction alone, so batching cannot show there).
  const loaded = tollgate
    .filter((c) => c.mode === "2 s blocks")
    .sort((a, b) => b.concurrency - a.concurrency)[0];
  const where = loaded === undefined ? "" : `, ${loaded.concurrency} payers on 2 s blocks`;
  const tx = loaded === undefined ? Number.NaN : perPayment(loaded.transactions, loaded);
  const rpcCalls = loaded === undefined ? Number.NaN : perPayment(loaded.rpcCalls, loaded);
  lines.push(
    `  ≤ 0.1 transactions per payment${where}: ${fmt(tx)} (${verdict(Number.isFinite(tx) ? tx <= 0.1 : undefined)})`,
  );
  lines.push(
    `  ≤ 3 RPC calls per payment${where}: ${fmt(rpcCalls)} (${verdict(Number.isFinite(rpcCalls) ? rpcCalls <= 3 : undefined)})`,
  );
  return lines.join("\n");
}

async function runMode(mode: Mode, allCells: Cell[]): Promise<string> {
  const maxPayers = Math.max(...mode.concurrency);
  // Accounts: 0 deployer, 1 Tollgate's gas, 2 and 3 the x402 facilitators' gas, then payers for each
  // stack. All hold USDC of the devnet's FiatToken, which every stack settles in.
  const devnet = await startDevnet({
    accounts: 4 + STACKS.length * maxPayers,
    blockTime: mode.blockTime,
    token: "usdc",
  });
  const payersOf = (i: number) => devnet.accounts.slice(4 + i * maxPayers, 4 + (i + 1) * maxPayers);
  const stacks: PaidStack[] = [];
  let payers: PayerProcess | undefined;
  try {
    const common = { devnet, price: PRICE, path: PATH };
    const payTo = (n: number): Address => getAddress(`0x${n.toString(16).padStart(40, "0")}`);
    const tollgate = await startTollgateStack({
      ...common,
      gas: devnet.accounts[1]!,
      payers: payersOf(0),
      payTo: payTo(0x7011),
      rpc: createRpcCounter(),
      databaseUrl: DATABASE_URL,
    });
    stacks.push(tollgate);
    const x402Managed = await startX402Stack({
      ...common,
      gas: devnet.accounts[2]!,
      payers: payersOf(1),
      payTo: payTo(0x4021),
      rpc: createRpcCounter(),
      nonceManager: true,
    });
    stacks.push(x402Managed);
    const x402 = await startX402Stack({
      ...common,
      gas: devnet.accounts[3]!,
      payers: payersOf(2),
      payTo: payTo(0x402),
      rpc: createRpcCounter(),
    });
    stacks.push(x402);

    // Payers in a process of their own unless --one-process (payerProcess.ts).
    payers = ONE_PROCESS ? undefined : startPayerProcess();
    for (const stack of stacks) await payers?.setUp(stack.name, stack.payers.spec, stack.payers.keys);

    // Warm-up, not measured: each stack's one-time lookups (JWKS, /supported) and the JIT, in the
    // process that pays.
    for (const stack of stacks) {
      const options = { url: stack.url, concurrency: 1, budgetMs: 0, minRounds: 1 };
      const warm =
        payers === undefined
          ? await runPayers((i) => stack.payingFetch(i), options)
          : await payers.run(stack.name, options);
      if (warm.failed > 0) {
        const seen = [...warm.failures, ...stack.facilitatorFailures()].map(([reason]) => reason).join("; ");
        throw new Error(`${stack.name} warm-up failed: ${seen}`);
      }
    }
    // What the process burns with both stacks up and no payments (timers, polling loops), for reading
    // the CPU column: a slow cell carries more of it per payment.
    const idleBefore = process.cpuUsage();
    const idleStart = process.hrtime.bigint();
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const idle = process.cpuUsage(idleBefore);
    const idleCpuMsPerSecond = ((idle.user + idle.system) / 1000 / elapsedMs(idleStart)) * 1000;

    const cells: Cell[] = [];
    for (const [index, concurrency] of mode.concurrency.entries()) {
      // Rotate which stack goes first, so drift in the machine's load does not favour one.
      const order = [tollgate, x402Managed, x402];
      for (let i = 0; i < index % order.length; i++) order.push(order.shift()!);
      for (const stack of order) cells.push(await runCell(devnet, stack, mode, concurrency, payers));
    }
    allCells.push(...cells);
    return `${report(mode, benchToken(devnet), cells)}\n  idle CPU of the bench process, every stack up: ${fmt(idleCpuMsPerSecond)} ms per second`;
  } finally {
    await payers?.stop();
    for (const stack of stacks.reverse()) await stack.stop();
    await devnet.stop();
  }
}

console.log(
  `token: Circle's FiatToken v2.2 (USDC) for every stack; Tollgate facilitator store: ${DATABASE_URL === undefined ? "PGlite in memory" : "PostgreSQL (DATABASE_URL)"}; price ${PRICE} (0.01 USDC); viem polls every 50 ms in every facilitator; payers ${ONE_PROCESS ? "in the bench process (--one-process)" : "in a payer process of their own"}`,
);
const allCells: Cell[] = [];
for (const mode of MODES) {
  console.log(await runMode(mode, allCells));
  console.log();
}
console.log(goals(allCells));
