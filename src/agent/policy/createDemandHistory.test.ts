import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { createDemandHistory, createMemoryDemandHistory } from "./createDemandHistory.ts";
import { demandModelFor, estimateDemand } from "./demandEstimate.ts";

const DAY = 86_400;
const key = { agent: "researcher", provider: "0x1111111111111111111111111111111111111111", planId: "4" };
let store: Store;

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});

afterAll(async () => {
  await store?.close();
});

describe("the learned demand's forecast bias", () => {
  it("is kept in the store across processes, as in memory: the calls the forecasts in force expected", async () => {
    const clock = createFixedClock(1_700_000_000_000);
    const stored = createDemandHistory({ store, clock });
    const memory = createMemoryDemandHistory({ clock });
    // A forecast of 160 calls a day, 40 made.
    const prior = { calls: 160, horizonSeconds: DAY };
    for (let i = 0; i < 40; i += 1) {
      await stored.record(key, DAY, { prior, oneTimePrice: 10n });
      await memory.record(key, DAY, { prior, oneTimePrice: 10n });
      clock.advance((DAY * 1000) / 40);
    }
    // Another process of the agent reads the same evidence.
    const again = await createDemandHistory({ store, clock }).get(key);
    const inMemory = await memory.get(key);
    expect(again!.state.expected).toBeGreaterThan(again!.state.calls);
    expect(again!.state.expected).toBeCloseTo(inMemory!.state.expected!, 6);
    expect(again!.state.calls).toBeCloseTo(inMemory!.state.calls, 6);
    const estimate = estimateDemand(again!.state, clock.now(), demandModelFor(DAY), 160 / DAY);
    expect(estimate.bias!).toBeLessThan(0.6);
    // Calls recorded without a forecast expect nothing: the bias is learned only against forecasts.
    const other = { ...key, planId: "5" };
    await stored.record(other, DAY);
    clock.advance(3_600_000);
    await stored.record(other, DAY);
    expect((await stored.get(other))!.state.expected).toBe(0);
  });

  it("keeps the busy rate it remembers and the recent calls, so another process resumes on them", async () => {
    const clock = createFixedClock(1_700_000_000_000);
    const stored = createDemandHistory({ store, clock });
    const memory = createMemoryDemandHistory({ clock });
    const busy = { ...key, planId: "6" };
    // 60 calls in a day, then two quiet days.
    for (let i = 0; i < 60; i += 1) {
      await stored.record(busy, DAY, { oneTimePrice: 10n });
      await memory.record(busy, DAY, { oneTimePrice: 10n });
      clock.advance((DAY * 1000) / 60);
    }
    clock.advance(2 * DAY * 1000);
    await stored.record(busy, DAY);
    await memory.record(busy, DAY);
    const again = (await createDemandHistory({ store, clock }).get(busy))!.state;
    const inMemory = (await memory.get(busy))!.state;
    expect(again.recall!).toBeGreaterThan(20 / DAY);
    expect(again.recall!).toBeCloseTo(inMemory.recall!, 9);
    expect(again.recent!).toBeCloseTo(inMemory.recent!, 6);
    expect(again.recentExposure!).toBeCloseTo(inMemory.recentExposure!, 3);
    // The arrivals the fast estimate rests on (calls seconds apart counted once) are kept too.
    expect(again.recentArrivals!).toBeGreaterThan(0);
    expect(again.recentArrivals!).toBeCloseTo(inMemory.recentArrivals!, 6);
    const model = demandModelFor(DAY);
    expect(estimateDemand(again, clock.now(), model).recall).toBeCloseTo(
      estimateDemand(inMemory, clock.now(), model).recall,
      9,
    );
  });
});
