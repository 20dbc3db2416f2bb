import { getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { createSpendCollector, type SpendEvent } from "../spendReport.ts";
import { latestRunReport, spendEventsOf, startRunRecording } from "./runSpendRecords.ts";

// Offers carry checksummed addresses (PolicyOfferSchema), as the gate's 402 gives them.
const seller = getAddress("0x00000000000000000000000000000000000000aa");
let store: Store;
beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});
afterAll(async () => {
  await store?.close();
});

const events: SpendEvent[] = [
  {
    tool: "summarize",
    provider: seller,
    mode: "subscription",
    amount: 50_000n,
    ok: true,
    reason: "100 calls expected; subscribe.",
    offer: {
      provider: seller,
      oneTime: { amount: 20_000n },
      subscription: {
        planId: "3",
        amount: 50_000n,
        interval: 2_592_000,
        includedUnits: 0,
        overageUnitPrice: 0n,
      },
    },
    subscriptionId: "7",
    transaction: `0x${"ab".repeat(32)}`,
  },
  { tool: "summarize", provider: seller, mode: "subscription", amount: 0n, ok: true },
  // A call paid by a prepaid channel's voucher is kept under its own mode, not dropped by the mode check.
  { tool: "detect-language", provider: seller, mode: "channel", amount: 4_000n, ok: true },
  {
    tool: "detect-language",
    provider: seller,
    mode: "one-time",
    amount: 10_000n,
    ok: false,
    error: "SellerUnreachable",
  },
];

describe("run spend records", () => {
  it("keeps a run's events so the report rebuilt from them equals the run's own", async () => {
    const clock = createFixedClock(Date.parse("2026-11-22T10:00:00Z"));
    const run = startRunRecording(store, { agent: "researcher", clock });
    const collector = createSpendCollector();
    for (const e of events) {
      run.record(e);
      collector.record(e);
    }
    await run.finish();
    const latest = await latestRunReport(store, "researcher");
    expect(latest?.run.run_id).toBe(run.runId);
    expect(latest?.run.finished_at).toEqual(new Date(clock.now()));
    expect(latest?.report).toEqual(collector.report());
    const rows = await spendEventsOf(store, "researcher", new Date(0));
    expect(rows.map((r) => [r.tool, r.amount, r.ok])).toEqual([
      ["summarize", 50_000n, true],
      ["summarize", 0n, true],
      ["detect-language", 4_000n, true],
      ["detect-language", 10_000n, false],
    ]);
  });

  it("never fails the run: a write the store refuses is reported and dropped", async () => {
    const errors: unknown[] = [];
    const clock = createFixedClock(0);
    const run = startRunRecording(store, {
      agent: "not a valid agent id!",
      clock,
      onError: (e) => errors.push(e),
    });
    run.record(events[0]!);
    await expect(run.finish()).resolves.toBeUndefined();
    expect(errors.length).toBeGreaterThan(0);
  });
});
