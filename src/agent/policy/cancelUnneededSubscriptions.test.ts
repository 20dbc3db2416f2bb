import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import {
  type CancelClaims,
  cancelUnneededSubscriptions,
  createCancelClaims,
  createMemoryCancelClaims,
  type HeldSubscriptionSource,
} from "./cancelUnneededSubscriptions.ts";
import { createDemandHistory, createMemoryDemandHistory, type DemandHistory } from "./createDemandHistory.ts";
import { cancelLeadSeconds, type HeldSubscription, reviewSubscription } from "./reviewSubscription.ts";

const DAY = 86_400;
const PROVIDER = "0xAbCdEf0000000000000000000000000000000001";
const SUBSCRIBER = "0x2222222222222222222222222222222222222222" as const;
const T0 = 1_700_000_000_000;
/** Chain time of the renewal; the tests place the chain relative to it. */
const RENEWAL = 1_700_100_000;

// 0.01 per call once, 0.20 a day by subscription: it pays from 20 calls a day.
const held = (over: Partial<HeldSubscription> = {}): HeldSubscription => ({
  subscriptionId: "7",
  planId: "3",
  provider: PROVIDER,
  status: "Active",
  amount: 200_000n,
  interval: DAY,
  includedUnits: 0,
  overageUnitPrice: 0n,
  nextChargeAt: RENEWAL,
  ...over,
});

async function callsPerDay(
  demand: DemandHistory,
  clock: ReturnType<typeof createFixedClock>,
  agent: string,
  n: number,
  days = 2,
) {
  for (let d = 0; d < days; d += 1) {
    for (let i = 0; i < n; i += 1) {
      await demand.record({ agent, provider: PROVIDER, planId: "3" }, DAY, { oneTimePrice: 10_000n });
      clock.advance((DAY * 1000) / n);
    }
  }
}

/** A source over a list the test controls; cancels are counted, and flip the subscription's status. */
function source(subs: HeldSubscription[], chainTime: () => number, fail = false) {
  const cancels: string[] = [];
  const s: HeldSubscriptionSource = {
    async list() {
      return { subscriptions: subs.map((x) => ({ ...x })), chainTime: chainTime() };
    },
    async cancel(id) {
      if (fail) throw new Error("facilitator unreachable");
      cancels.push(id);
      const sub = subs.find((x) => x.subscriptionId === id)!;
      sub.status = "Cancelled";
      sub.nextChargeAt = null;
    },
  };
  return { source: s, cancels };
}

describe("reviewSubscription", () => {
  const demand = {
    state: { calls: 2, exposure: DAY, at: T0, since: T0 - DAY * 1000 },
    oneTimePrice: 10_000n,
  };
  const lead = cancelLeadSeconds(DAY);

  it("keeps a subscription until the window before its renewal, then cancels one the running rate does not justify", () => {
    const early = reviewSubscription({
      subscription: held(),
      demand,
      nowMs: T0,
      chainTime: RENEWAL - lead - 1,
    });
    expect(early.action).toBe("keep");
    expect(early.reason).toMatch(/paid for another/);
    // When to look again: the window opens in a second (what the watcher sleeps at most).
    expect(early.reviewInSeconds).toBe(1);
    const inWindow = reviewSubscription({
      subscription: held(),
      demand,
      nowMs: T0,
      chainTime: RENEWAL - lead,
    });
    expect(inWindow.action).toBe("cancel");
    expect(inWindow.reason).toMatch(/cancel before it renews/);
    expect(inWindow.callsPerPeriod).toBeLessThan(20);
  });

  it("never cancels once the renewal is due, nor a subscription that is not Active", () => {
    expect(reviewSubscription({ subscription: held(), demand, nowMs: T0, chainTime: RENEWAL }).action).toBe(
      "keep",
    );
    for (const status of ["Paused", "Cancelled", "PastDue"] as const) {
      expect(
        reviewSubscription({ subscription: held({ status }), demand, nowMs: T0, chainTime: RENEWAL - 10 })
          .action,
      ).toBe("keep");
    }
  });

  it("keeps a subscription still worth its price, counting the overage it would pay", () => {
    const busy = {
      state: { calls: 40, exposure: DAY, at: T0, since: T0 - DAY * 1000 },
      oneTimePrice: 10_000n,
    };
    expect(
      reviewSubscription({ subscription: held(), demand: busy, nowMs: T0, chainTime: RENEWAL - 10 }).action,
    ).toBe("keep");
    // With 10 included units and 0.009 per unit beyond them, 40 calls cost 0.47 subscribed, 0.40 once.
    const metered = held({ includedUnits: 10, overageUnitPrice: 9_000n });
    expect(
      reviewSubscription({ subscription: metered, demand: busy, nowMs: T0, chainTime: RENEWAL - 10 }).action,
    ).toBe("cancel");
  });
});

const backends: [string, () => Promise<Store | undefined>][] = [
  ["in memory", async () => undefined],
  ["in the store", async () => createTestStore({ databaseUrl: process.env.DATABASE_URL })],
];
describe.each(backends)("cancelUnneededSubscriptions (%s)", (_name, open) => {
  let store: Store | undefined;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store?.close();
  });
  const setup = () => {
    const clock = createFixedClock(T0);
    const demand =
      store === undefined ? createMemoryDemandHistory({ clock }) : createDemandHistory({ store, clock });
    const claims: CancelClaims =
      store === undefined ? createMemoryCancelClaims() : createCancelClaims({ store, clock });
    return { clock, demand, claims };
  };

  it("cancels before the renewal a subscription used less than it costs, once, and says why", async () => {
    const { clock, demand, claims } = setup();
    await callsPerDay(demand, clock, "researcher", 4);
    const subs = [held({ subscriptionId: "7" })];
    let chainTime = RENEWAL - 3 * 3600;
    const { source: src, cancels } = source(subs, () => chainTime);
    const run = () =>
      cancelUnneededSubscriptions({
        agent: "researcher",
        subscriber: SUBSCRIBER,
        source: src,
        demand,
        claims,
        clock,
      });

    // Three hours before the renewal: still paid for, still used.
    expect((await run())[0]).toMatchObject({ action: "keep" });
    expect(cancels).toEqual([]);
    // An hour before (inside the window): cancelled, with the running rate in the reason.
    chainTime = RENEWAL - 3600;
    const [outcome] = await run();
    expect(outcome).toMatchObject({ action: "cancel", outcome: "cancelled", subscriptionId: "7" });
    expect(outcome!.reason).toMatch(/running rate of [\d.]+ calls per 1 day/);
    expect(cancels).toEqual(["7"]);
    expect(await claims.list(SUBSCRIBER)).toEqual([
      expect.objectContaining({ subscriptionId: "7", status: "cancelled", agent: "researcher" }),
    ]);
    // Never twice: the chain says Cancelled now, and the claim stands even if a stale list still says Active.
    expect((await run())[0]).toMatchObject({ action: "keep" });
    subs[0]!.status = "Active";
    subs[0]!.nextChargeAt = RENEWAL;
    expect((await run())[0]).toMatchObject({ action: "cancel", outcome: "already-cancelled" });
    expect(cancels).toEqual(["7"]);
  });

  it("keeps a subscription the agent uses enough, and leaves alone plans it never called", async () => {
    const { clock, demand, claims } = setup();
    await callsPerDay(demand, clock, "writer", 50);
    const subs = [held({ subscriptionId: "8" }), held({ subscriptionId: "9", planId: "4" })];
    const { source: src, cancels } = source(subs, () => RENEWAL - 60);
    const outcomes = await cancelUnneededSubscriptions({
      agent: "writer",
      subscriber: SUBSCRIBER,
      source: src,
      demand,
      claims,
      clock,
    });
    expect(outcomes).toHaveLength(1);
    expect(outcomes[0]).toMatchObject({ subscriptionId: "8", action: "keep" });
    expect(outcomes[0]!.reason).toMatch(/renew\.$/);
    expect(cancels).toEqual([]);
  });

  it("drops its claim when the cancel fails, so a later check tries again", async () => {
    const { clock, demand, claims } = setup();
    await callsPerDay(demand, clock, "critic", 2);
    const subs = [held({ subscriptionId: "10" })];
    const failing = source(subs, () => RENEWAL - 60, true);
    const args = { agent: "critic", subscriber: SUBSCRIBER, demand, claims, clock };
    expect((await cancelUnneededSubscriptions({ ...args, source: failing.source }))[0]).toMatchObject({
      outcome: "failed",
      error: "facilitator unreachable",
    });
    const working = source(subs, () => RENEWAL - 60);
    expect((await cancelUnneededSubscriptions({ ...args, source: working.source }))[0]).toMatchObject({
      outcome: "cancelled",
    });
    expect(working.cancels).toEqual(["10"]);
  });

  it("keeps the learned demand across instances (a second process sees the first one's calls)", async () => {
    const { clock, demand } = setup();
    await callsPerDay(demand, clock, "reader", 3, 1);
    const again = store === undefined ? demand : createDemandHistory({ store, clock });
    const record = await again.get({ agent: "reader", provider: PROVIDER.toLowerCase(), planId: "3" });
    expect(record?.oneTimePrice).toBe(10_000n);
    // Three calls within a day, decayed by the quarter-period half-life: more than one call's worth,
    // and exactly what the first instance holds.
    const first = await demand.get({ agent: "reader", provider: PROVIDER, planId: "3" });
    expect(record?.state.calls).toBeGreaterThan(1);
    expect(record?.state.calls).toBeCloseTo(first!.state.calls, 9);
    await expect(again.get({ agent: "reader", provider: PROVIDER, planId: "x" })).rejects.toThrow(/plan id/);
  });
});
