/**
 * The `channel` scheme against the one-time path, in one run on a devnet with 2-second blocks.
 *
 * One-time: bench/support/tollgateStack.ts (Hono gate, facilitator, `fetchWithPayment`), 8 payers.
 * Channel: a facilitator with the channel module in this process; the gate in its own process
 * (bench/support/channelGateProcess.ts: `paymentGate` on `node:http`, journal voucher store, vouchers
 * forwarded every second), so `process.cpuUsage()` of that process is the gate's CPU alone; payers in
 * this process, each a channel wallet with `createChannelFetch` (up-front vouchers on a known route).
 * Up to 512 payers: 32 funded accounts, 16 wallets (channels) each. Both paths settle in Circle's
 * FiatToken v2.2 (USDC) on the same devnet; the output's first line names it and its address.
 *
 * Once every payer's channel is open, cells of 1, 8, 32 and 512 concurrent payers run for CELL_MS
 * each, every payer paying one request after another. Measured per cell: latency percentiles, paid
 * requests per second, gate CPU per paid request, HTTP exchanges per paid call, transactions mined
 * per 1,000 paid requests (every transaction in the cell's blocks: claims, and any channel opened),
 * failures. Then each goal with its measured value and whether it holds.
 *
 *   npx tsx bench/channel.ts
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Address, getAddress } from "viem";
import { setChannelOperator } from "../src/chain/actions/channels/setChannelOperator.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitator, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { providersModule } from "../src/facilitator/providers/providersModule.ts";
import { createFacilitatorClient, type FetchFn } from "../src/http/facilitatorClient.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import {
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
} from "../src/protocol/subscriptions.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { createChannelsModule } from "../src/schemes/channel/facilitator/channelsModule.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import { benchToken, describeBenchToken } from "./support/benchToken.ts";
import { createRpcCounter } from "./support/rpcCounter.ts";
import { runSocketLoad } from "./support/socketLoad.ts";
import { elapsedMs, fmt, percentile, table } from "./support/stats.ts";
import { startTollgateStack } from "./support/tollgateStack.ts";

const PRICE = 10_000n; // 0.01 USDC
const PATH = "/api/item";
const CELL_MS = 5_000;
const CONCURRENCY = (process.env.BENCH_CHANNEL_PAYERS?.split(",").map(Number) ?? [
  1, 8, 32, 512,
]) as readonly number[];
const PAYER_ACCOUNTS = 32;
const ONE_TIME_PAYERS = 8;
const ONE_TIME_MS = 6_000;
/** Channels opened at once before the cells. */
const OPEN_BATCH = 64;

type Cell = {
  payers: number;
  latenciesMs: number[];
  failed: number;
  failures: Map<string, number>;
  elapsedMs: number;
  exchanges: number;
  gateCpuMs: number;
  transactions: number;
};

const payTo = (n: number): Address => getAddress(`0x${n.toString(16).padStart(40, "0")}`);

/** One payer's loop: paid requests one after another until `until` (hrtime ns). */
async function payLoop(paidFetch: FetchFn, url: string, until: bigint, cell: Cell): Promise<void> {
  while (process.hrtime.bigint() < until) {
    const sent = process.hrtime.bigint();
    try {
      const response = await paidFetch(url);
      const body = await response.text();
      if (response.status === 200 && body === '{"item":1}') {
        cell.latenciesMs.push(elapsedMs(sent));
        continue;
      }
      const reason = `HTTP ${response.status} ${body.slice(0, 60)}`;
      cell.failures.set(reason, (cell.failures.get(reason) ?? 0) + 1);
    } catch (error) {
      const reason =
        error instanceof TollgateError ? error.code : String((error as Error).message).slice(0, 60);
      cell.failures.set(reason, (cell.failures.get(reason) ?? 0) + 1);
    }
    cell.failed++;
  }
}

async function runOneTime(
  devnet: Devnet,
): Promise<{ p50: number; perSecond: number; ok: number; failed: number }> {
  const stack = await startTollgateStack({
    devnet,
    gas: devnet.accounts[1]!,
    payers: devnet.accounts.slice(3 + PAYER_ACCOUNTS, 3 + PAYER_ACCOUNTS + ONE_TIME_PAYERS),
    payTo: payTo(0x7011),
    price: PRICE,
    path: PATH,
    rpc: createRpcCounter(),
  });
  try {
    await (await stack.payingFetch(0)(stack.url)).text(); // warm-up
    const cell: Cell = {
      payers: ONE_TIME_PAYERS,
      latenciesMs: [],
      failed: 0,
      failures: new Map(),
      elapsedMs: 0,
      exchanges: 0,
      gateCpuMs: 0,
      transactions: 0,
    };
    const start = process.hrtime.bigint();
    const until = start + BigInt(ONE_TIME_MS) * 1_000_000n;
    await Promise.all(
      Array.from({ length: ONE_TIME_PAYERS }, async (_, i) => {
        const paid = stack.payingFetch(i);
        while (process.hrtime.bigint() < until) {
          const sent = process.hrtime.bigint();
          const response = await paid(stack.url);
          await response.text();
          if (response.status === 200) cell.latenciesMs.push(elapsedMs(sent));
          else cell.failed++;
        }
      }),
    );
    const elapsed = elapsedMs(start);
    return {
      p50: percentile(cell.latenciesMs, 50),
      perSecond: (cell.latenciesMs.length / elapsed) * 1000,
      ok: cell.latenciesMs.length,
      failed: cell.failed,
    };
  } finally {
    await stack.stop();
  }
}

async function registerProvider(url: string, devnet: Devnet, index: number): Promise<string> {
  const account = devnet.accounts[index]!;
  const post = (path: string, body: unknown) =>
    fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: account.address })).json(),
  );
  const signature = await account.account.signMessage({ message: challenge.challenge });
  const reply = await post("/providers", {
    address: account.address,
    challenge: challenge.challenge,
    signature,
  });
  return ProviderRegisterResponseSchema.parse(await reply.json()).apiKey;
}

function startGateProcess(config: Record<string, unknown>): Promise<{ url: string; child: ChildProcess }> {
  const file = new URL("./support/channelGateProcess.ts", import.meta.url).pathname;
  const child = spawn(process.execPath, ["--import", "tsx", file, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let buffer = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8");
      const match = /listening (\S+)\n/.exec(buffer);
      if (match !== null) resolve({ url: match[1]!, child });
    });
    child.once("exit", (code) => reject(new Error(`gate process exited (${code})`)));
  });
}

async function main(): Promise<void> {
  // Accounts: 0 the channel facilitator's gas, 1 the one-time facilitator's gas, 2 the channel payee,
  // then 32 channel payer accounts and 8 one-time payers.
  const devnet = await startDevnet({
    accounts: 3 + PAYER_ACCOUNTS + ONE_TIME_PAYERS,
    blockTime: 2,
    token: "usdc",
  });
  const token = benchToken(devnet);
  const dir = mkdtempSync(join(tmpdir(), "tollgate-bench-channel-"));
  const stops: (() => Promise<void> | void)[] = [];
  try {
    console.log(describeBenchToken(token));
    console.log("one-time path: 8 payers, 2 s blocks …");
    const oneTime = await runOneTime(devnet);

    const store = await createTestStore({});
    stops.push(() => store.close());
    const gas = devnet.accounts[0]!;
    const payee = devnet.accounts[2]!;
    const facilitator = createFacilitator({
      store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: gas.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      channels: devnet.contracts.channels,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      builtinModules: false,
      // Every payer is on loopback and pays in a tight loop: rate limits would measure themselves.
      rateLimits: { perClient: false, perPayer: false },
      // Claims on the module's defaults (1 USDC unclaimed, every 5 s); no per-payer limit: 16 channels
      // share each payer account here.
      modules: [providersModule, createChannelsModule({ minDeposit: 100_000n, perPayer: false })],
    });
    await facilitator.start();
    stops.unshift(() => facilitator.stop());
    const server = await serveApp(facilitator.app);
    stops.unshift(() => server.close());
    const apiKey = await registerProvider(server.url, devnet, 2);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await setChannelOperator(devnet.walletClient(payee), {
        channels: devnet.contracts.channels,
        operator: gas.address,
        allowed: true,
      }),
    });
    const gate = await startGateProcess({
      payTo: payee.address,
      network: devnet.network,
      token: { address: token.address, name: token.name, version: token.version },
      facilitator: server.url,
      apiKey,
      contract: devnet.contracts.channels,
      journal: join(dir, "vouchers.journal"),
      price: PRICE.toString(),
      path: PATH,
    });
    stops.unshift(
      () =>
        new Promise<void>((resolve) => {
          gate.child.once("exit", () => resolve());
          gate.child.kill("SIGTERM");
        }),
    );
    const url = `${gate.url}${PATH}`;
    const gateCpuMs = async () => {
      const usage = (await (await fetch(`${gate.url}/_cpu`)).json()) as { user: number; system: number };
      return (usage.user + usage.system) / 1000;
    };

    // Payers: the first 8 pay in every cell, so their deposits are sized for it; the others less.
    const maxPayers = Math.max(...CONCURRENCY);
    let exchanges = 0;
    const counting: FetchFn = (input, init) => {
      exchanges++;
      return fetch(input, init);
    };
    const wallets: ReturnType<typeof createChannelWallet>[] = [];
    const payers = Array.from({ length: maxPayers }, (_, i) => {
      const account = devnet.accounts[3 + (i % PAYER_ACCOUNTS)]!;
      const wallet = createChannelWallet({
        account: account.account,
        network: devnet.network,
        facilitator: createFacilitatorClient({ url: server.url, fetch }),
        calls: i < 8 ? 40_000 : i < 32 ? 4_000 : 500,
      });
      wallets.push(wallet);
      return createChannelFetch(counting, { wallet, maxPrice: PRICE });
    });

    console.log(`opening ${maxPayers} channels (each payer's first call) …`);
    const firstCallsMs: number[] = [];
    const openCell: Cell = {
      payers: maxPayers,
      latenciesMs: firstCallsMs,
      failed: 0,
      failures: new Map(),
      elapsedMs: 0,
      exchanges: 0,
      gateCpuMs: 0,
      transactions: 0,
    };
    const openStart = process.hrtime.bigint();
    // Opens go through the facilitator OPEN_BATCH at a time (each waits for its block); one that fails
    // (the facilitator busy) is tried again, up to three times.
    const firstCall = async (paid: FetchFn): Promise<void> => {
      for (let attempt = 1; ; attempt++) {
        const sent = process.hrtime.bigint();
        const response = await paid(url).catch((error: unknown) => error as Error);
        // Duck-typed: undici's Response is not an instance of the global one @hono/node-server installs.
        const answered = (r: Response | Error): r is Response => typeof (r as Response).status === "number";
        const body = answered(response) ? await response.text() : "";
        if (answered(response) && response.status === 200 && body === '{"item":1}') {
          firstCallsMs.push(elapsedMs(sent));
          return;
        }
        if (attempt < 3) continue;
        openCell.failed++;
        const reason = answered(response) ? `HTTP ${response.status} ${body.slice(0, 80)}` : response.message;
        openCell.failures.set(reason, (openCell.failures.get(reason) ?? 0) + 1);
        return;
      }
    };
    for (let i = 0; i < payers.length; i += OPEN_BATCH) {
      await Promise.all(payers.slice(i, i + OPEN_BATCH).map(firstCall));
    }
    const openMs = elapsedMs(openStart);
    // Let the first forwards and claims land before the steady state is measured.
    await new Promise((resolve) => setTimeout(resolve, 6_000));

    const cells: Cell[] = [];
    for (const n of CONCURRENCY) {
      const cell: Cell = {
        payers: n,
        latenciesMs: [],
        failed: 0,
        failures: new Map(),
        elapsedMs: 0,
        exchanges: 0,
        gateCpuMs: 0,
        transactions: 0,
      };
      const cpuBefore = await gateCpuMs();
      const blockBefore = await devnet.publicClient.getBlockNumber();
      exchanges = 0;
      const start = process.hrtime.bigint();
      const until = start + BigInt(CELL_MS) * 1_000_000n;
      await Promise.all(payers.slice(0, n).map((paid) => payLoop(paid, url, until, cell)));
      cell.elapsedMs = elapsedMs(start);
      cell.exchanges = exchanges;
      cell.gateCpuMs = (await gateCpuMs()) - cpuBefore;
      const blockAfter = await devnet.publicClient.getBlockNumber();
      for (let b = blockBefore + 1n; b <= blockAfter; b++) {
        cell.transactions += (await devnet.publicClient.getBlock({ blockNumber: b })).transactions.length;
      }
      cells.push(cell);
    }

    // The gate alone: 8 payers' vouchers signed ahead (by their wallets, in order) and sent over 8
    // keep-alive connections by a load generator in a worker thread, so the payers' own CPU (fetch,
    // signing) does not cap what the gate is measured at.
    const LOAD_VOUCHERS = 4_000;
    const signed: string[][] = wallets.slice(0, 8).map((wallet) => {
      const terms = wallet.routeTerms("GET", url)!;
      return Array.from({ length: LOAD_VOUCHERS }, () => wallet.payNow(terms)!.header);
    });
    const interleaved = Array.from(
      { length: LOAD_VOUCHERS * 8 },
      (_, i) => signed[i % 8]![Math.floor(i / 8)]!,
    );
    const loadCpuBefore = await gateCpuMs();
    const loadBlockBefore = await devnet.publicClient.getBlockNumber();
    const load = await runSocketLoad({
      origin: gate.url,
      path: PATH,
      concurrency: 8,
      durationMs: CELL_MS,
      header: { name: "X-Tollgate-Channel", values: interleaved },
    });
    const loadCpu = (await gateCpuMs()) - loadCpuBefore;
    let loadTxs = 0;
    for (let b = loadBlockBefore + 1n, end = await devnet.publicClient.getBlockNumber(); b <= end; b++) {
      loadTxs += (await devnet.publicClient.getBlock({ blockNumber: b })).transactions.length;
    }
    const loadOk = load.statuses[200] ?? 0;
    const loadCell: Cell = {
      payers: 8,
      latenciesMs: load.latenciesMs,
      failed: load.count - loadOk,
      failures: new Map(
        Object.entries(load.statuses)
          .filter(([status]) => status !== "200")
          .map(([status, n]) => [`HTTP ${status}`, n]),
      ),
      elapsedMs: load.elapsedMs,
      exchanges: load.count,
      gateCpuMs: loadCpu,
      transactions: loadTxs,
    };

    const ok = (c: Cell) => c.latenciesMs.length;
    const perSecond = (c: Cell) => (ok(c) / c.elapsedMs) * 1000;
    console.log(
      `\nchannel scheme, 2 s blocks, price ${PRICE} (0.01 USDC); gate in its own process (node:http, journal store)\n${describeBenchToken(token)}`,
    );
    console.log(
      table(
        [
          "payers",
          "paid/sent",
          "p50 ms",
          "p90 ms",
          "p99 ms",
          "paid/s",
          "gate cpu ms/paid",
          "exch/paid",
          "tx/1000 paid",
          "failed",
        ],
        [...cells, loadCell].map((c) => [
          c === loadCell ? "8 (load generator)" : String(c.payers),
          `${ok(c)}/${ok(c) + c.failed}`,
          fmt(percentile(c.latenciesMs, 50)),
          fmt(percentile(c.latenciesMs, 90)),
          fmt(percentile(c.latenciesMs, 99)),
          fmt(perSecond(c)),
          fmt(c.gateCpuMs / ok(c)),
          fmt(c.exchanges / ok(c)),
          fmt((c.transactions / ok(c)) * 1000),
          String(c.failed),
        ]),
      ),
    );
    for (const c of [openCell, ...cells, loadCell]) {
      for (const [reason, count] of c.failures) console.log(`  ${c.payers} payers: ${count}× ${reason}`);
    }
    console.log(
      `opening: ${maxPayers} first calls (402, open through the facilitator, paid retry) in ${fmt(openMs / 1000)} s; first call p50 ${fmt(percentile(firstCallsMs, 50))} ms, max ${fmt(Math.max(...firstCallsMs))} ms; ${openCell.failed} failed`,
    );
    console.log(
      `one-time path, same devnet: 8 payers p50 ${fmt(oneTime.p50)} ms, ${fmt(oneTime.perSecond)} paid/s (${oneTime.ok} paid, ${oneTime.failed} failed)`,
    );

    const none: Cell = {
      payers: 0,
      latenciesMs: [],
      failed: Number.NaN,
      failures: new Map(),
      elapsedMs: 1,
      exchanges: 0,
      gateCpuMs: Number.NaN,
      transactions: 0,
    };
    const byPayers = (n: number) => cells.find((c) => c.payers === n) ?? none;
    const steady = [...cells, loadCell];
    const all = steady.reduce((sum, c) => sum + ok(c), 0);
    const txs = steady.reduce((sum, c) => sum + c.transactions, 0);
    const exch = steady.reduce((sum, c) => sum + c.exchanges, 0);
    const goals: [string, number, string, boolean][] = [
      [
        "p50 ms, 1 payer (≤ 1)",
        percentile(byPayers(1).latenciesMs, 50),
        "",
        percentile(byPayers(1).latenciesMs, 50) <= 1,
      ],
      [
        "paid/s, 8 payers, load generator (≥ 1,500)",
        perSecond(loadCell),
        `${fmt(perSecond(byPayers(8)))} with the payers' fetch`,
        perSecond(loadCell) >= 1_500,
      ],
      [
        "gate CPU ms per paid request, 8 payers (≤ 0.3)",
        loadCell.gateCpuMs / ok(loadCell),
        `${fmt(byPayers(8).gateCpuMs / ok(byPayers(8)))} with the payers' fetch`,
        loadCell.gateCpuMs / ok(loadCell) <= 0.3,
      ],
      ["HTTP exchanges per paid call (1)", exch / all, "", exch === all],
      [
        "on-chain tx per 1,000 paid requests (≤ 1)",
        (txs / all) * 1000,
        `${txs} tx / ${all} paid`,
        (txs / all) * 1000 <= 1,
      ],
      ...[1, 32, 512].map((n): [string, number, string, boolean] => [
        `failures, ${n} payers (0)`,
        byPayers(n).failed,
        "",
        byPayers(n).failed === 0,
      ]),
      [
        "vs one-time p50, 8 payers (ratio)",
        percentile(byPayers(8).latenciesMs, 50) / oneTime.p50,
        `${fmt(percentile(byPayers(8).latenciesMs, 50))} ms vs ${fmt(oneTime.p50)} ms`,
        true,
      ],
      ["vs one-time paid/s, 8 payers (ratio)", perSecond(byPayers(8)) / oneTime.perSecond, "", true],
    ];
    console.log("\ngoals");
    console.log(
      table(
        ["goal", "measured", "", "holds"],
        goals.map(([name, value, note, holds]) => [name, fmt(value), note, holds ? "yes" : "NO"]),
      ),
    );
  } finally {
    for (const stop of stops) await stop();
    await devnet.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
