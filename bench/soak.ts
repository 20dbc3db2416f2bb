/**
 * The soak (docs/reliability.md): the fault suite's stack — two `tollgate facilitator` processes on one
 * PostgreSQL database, two gate processes sharing Redis, anvil — under a steady load for `--minutes`,
 * with no faults injected: payers buying one-time requests back to back, subscribers on a one-minute
 * plan renewed by the facilitators' keeper, metered calls on two capped subscriptions, calls paid by
 * channel vouchers, an agent buying a paid tool through its budget ledger. Reports throughput and
 * p50/p99 latency per minute, the RSS of every process at the start and the end, the errors, and the
 * reconciliation against the chain.
 *
 *   npm run soak -- --minutes 10        (DATABASE_URL, REDIS_URL: default the machine's servers)
 */
import { parseArgs } from "node:util";
import { createPayer } from "../src/client/createPayer.ts";
import { type FaultStack, startFaultStack } from "../test/faults/support/faultStack.ts";
import { startMixedLoad } from "../test/faults/support/mixedLoad.ts";
import { balancesOf, reconcile } from "../test/faults/support/reconcile.ts";
import { closeChannels, reconcileMixed, settleMetered } from "../test/faults/support/reconcileMixed.ts";
import { runPurchases } from "../test/faults/support/workload.ts";
import { fmt, percentile, table } from "./support/stats.ts";

const { values } = parseArgs({
  options: { minutes: { type: "string", default: "10" }, payers: { type: "string", default: "6" } },
});
const minutes = Number(values.minutes);
const payerCount = Number(values.payers);

function rssOf(stack: FaultStack): Record<string, number | undefined> {
  const rss: Record<string, number | undefined> = {};
  for (const p of [stack.anvil, ...stack.facilitators, ...stack.gates]) rss[p.name] = p.rssKiB();
  rss["soak (payers)"] = Math.round(process.memoryUsage().rss / 1024);
  return rss;
}

const stack = await startFaultStack({
  facilitators: 2,
  gates: 2,
  databaseUrl: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  redisUrl: process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
  payers: payerCount,
  subscribers: 3,
  meteredSubscribers: 2,
  channelPayers: 2,
  agents: 1,
});
try {
  const before = await balancesOf(stack);
  for (const subscriber of stack.subscribers) {
    const payer = createPayer({
      account: subscriber.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
    });
    await payer.subscribe({ planId: stack.planId, maxOverage: 0n });
  }
  // Warm-up: one purchase per payer before the clock starts, so start-up costs are not in minute 1.
  const warm = runPurchases(stack, stack.payers.slice(0, 1), { slowShare: 0, random: Math.random });
  await new Promise((resolve) => setTimeout(resolve, 5_000));
  await warm.stop();
  const rssStart = rssOf(stack);
  const start = Date.now();
  const load = runPurchases(stack, stack.payers, { slowShare: 0, random: Math.random });
  // Caps far above what the run can use: the soak measures the steady path, not the refusals.
  const mixed = await startMixedLoad(stack, { meteredCaps: [5_000_000n], pauseMs: 100 });
  const rows: string[][] = [];
  for (let minute = 1; minute <= minutes; minute++) {
    await new Promise((resolve) => setTimeout(resolve, start + minute * 60_000 - Date.now()));
    const inMinute = (t: number) => t >= start + (minute - 1) * 60_000 && t < start + minute * 60_000;
    const window = load.purchases.filter((p) => inMinute(p.startedAt));
    const served = window.filter((p) => p.served);
    const kinds = {
      metered: mixed.metered.flatMap((m) => m.calls).filter((c) => inMinute(c.startedAt)),
      channel: mixed.channels.flatMap((c) => c.calls).filter((c) => inMinute(c.startedAt)),
      agent: mixed.agents.flatMap((a) => a.calls).filter((c) => inMinute(c.startedAt)),
    };
    const all = [...kinds.metered, ...kinds.channel, ...kinds.agent];
    const mixedServed = all.filter((c) => c.outcome === "served");
    const latencies = [...served.map((p) => p.latencyMs), ...mixedServed.map((c) => c.latencyMs)];
    const count = (calls: typeof all) => String(calls.filter((c) => c.outcome === "served").length);
    const row = [
      String(minute),
      String(served.length),
      count(kinds.metered),
      count(kinds.channel),
      count(kinds.agent),
      fmt((served.length + mixedServed.length) / 60),
      fmt(percentile(latencies, 50)),
      fmt(percentile(latencies, 99)),
      String(window.length - served.length + all.filter((c) => c.outcome !== "served").length),
    ];
    rows.push(row);
    process.stderr.write(`minute ${row.join(" ")}\n`);
  }
  await Promise.all([load.stop(), mixed.stop()]);
  const rssEnd = rssOf(stack);
  // Let the last renewals, usage and webhooks land, and close the channels, before reconciling.
  await settleMetered(stack, mixed);
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const closeProblems = await closeChannels(stack);
  await new Promise((resolve) => setTimeout(resolve, 30_000));
  const figures = await reconcile(stack, [...warm.purchases, ...load.purchases], before);
  const more = await reconcileMixed(stack, mixed, before);
  console.log(
    `soak: ${minutes} min, ${payerCount} one-time payers back to back, 2 metered subscribers, 2 channel payers, 1 agent (each 100 ms between calls), 2 facilitators, 2 gates\n`,
  );
  console.log(
    table(["minute", "one-time", "metered", "channel", "agent", "per s", "p50 ms", "p99 ms", "errors"], rows),
  );
  console.log(
    `\n${table(
      ["process", "RSS start MiB", "RSS end MiB"],
      Object.keys(rssStart).map((name) => [
        name,
        fmt((rssStart[name] ?? Number.NaN) / 1024),
        fmt((rssEnd[name] ?? Number.NaN) / 1024),
      ]),
    )}`,
  );
  const { details, ...numbers } = figures;
  const { details: moreDetails, ...moreNumbers } = more;
  console.log(`\nreconciliation: ${JSON.stringify(numbers)}`);
  console.log(`reconciliation (metered, channels, agents): ${JSON.stringify(moreNumbers)}`);
  const all = [...closeProblems, ...details, ...moreDetails];
  if (all.length > 0) console.log(all.slice(0, 20).join("\n"));
  const errors = [
    ...load.purchases.filter((p) => !p.served).map((p) => p.error ?? p.refusal),
    ...mixed
      .calls()
      .filter((c) => c.outcome !== "served")
      .map((c) => c.outcome),
  ];
  if (errors.length > 0) console.log(`errors: ${errors.slice(0, 10).join("; ")}`);
} finally {
  await stack.stop();
}
