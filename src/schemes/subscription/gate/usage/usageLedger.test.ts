import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../../../protocol/clock.ts";
import { createTestStore } from "../../../../store/createTestStore.ts";
import type { Store } from "../../../../store/store.ts";
import { createMemoryUsageLedger } from "./createMemoryUsageLedger.ts";
import { createPostgresUsageLedger } from "./createPostgresUsageLedger.ts";
import { applyUsage, type UsageLedger, type UsageRequest, usageRef } from "./usageLedger.ts";

const T0 = 1_763_800_000_000;
const DAY = 86_400;
const PERIOD_START = 1_763_800_000;
const PERIOD_END = PERIOD_START + 30 * DAY;

let nextId = 1n;
/** A fresh subscription id per test, so tests sharing a ledger never see each other's counts. */
const freshId = () => nextId++ * 1000n + BigInt(Math.floor(Math.random() * 1000));

function use(subscriptionId: bigint, overrides: Partial<UsageRequest> = {}): UsageRequest {
  return {
    subscriptionId,
    periodStart: PERIOD_START,
    periodEnd: PERIOD_END,
    units: 1,
    includedUnits: 3n,
    unitPrice: 1_000n,
    maxOverage: 5_000n,
    overageUsed: 0n,
    maxUnsettled: 1_000_000_000n,
    ...overrides,
  };
}

describe("applyUsage", () => {
  it("charges nothing within the included units and the unit price for each unit past them", () => {
    let cycle: ReturnType<typeof applyUsage>["cycle"];
    let unsettled = 0n;
    const charges: bigint[] = [];
    for (let i = 0; i < 5; i++) {
      const r = applyUsage(cycle, unsettled, use(1n));
      cycle = r.cycle;
      unsettled = r.unsettled;
      if (!r.reservation.ok) throw new Error("refused");
      charges.push(r.reservation.charge);
    }
    expect(charges).toEqual([0n, 0n, 0n, 1_000n, 1_000n]);
    expect(unsettled).toBe(2_000n);
    expect(cycle).toMatchObject({ units: 5n, overage: 2_000n, pending: 2_000n });
  });

  it("charges only the part of a multi-unit use that passes the included units", () => {
    const r = applyUsage(
      { periodStart: PERIOD_START, periodEnd: PERIOD_END, units: 2n, overage: 0n, pending: 0n },
      0n,
      use(1n, { units: 4 }),
    );
    expect(r.reservation).toEqual({ ok: true, unitsUsed: 6n, charge: 3_000n });
  });

  it("refuses a charge past the cap, counting the larger of the chain's and the ledger's overage", () => {
    const stored = {
      periodStart: PERIOD_START,
      periodEnd: PERIOD_END,
      units: 5n,
      overage: 2_000n,
      pending: 0n,
    };
    expect(applyUsage(stored, 0n, use(1n, { overageUsed: 4_500n })).reservation).toMatchObject({
      ok: false,
      reason: "AllowanceExhausted",
      available: 500n,
    });
    expect(
      applyUsage(stored, 0n, use(1n, { overageUsed: 1_000n, maxOverage: 3_000n })).reservation,
    ).toMatchObject({
      ok: true,
      charge: 1_000n,
    });
    expect(
      applyUsage(stored, 0n, use(1n, { overageUsed: 1_000n, maxOverage: 2_999n })).reservation,
    ).toMatchObject({
      ok: false,
      reason: "AllowanceExhausted",
    });
  });

  it("treats a plan without an overage price as a hard limit at the included units", () => {
    const stored = { periodStart: PERIOD_START, periodEnd: PERIOD_END, units: 3n, overage: 0n, pending: 0n };
    const r = applyUsage(stored, 0n, use(1n, { unitPrice: 0n, maxOverage: 10n ** 12n }));
    expect(r.reservation).toMatchObject({ ok: false, reason: "AllowanceExhausted" });
    expect(r.cycle).toBeUndefined();
  });

  it("refuses a charge that would take unsettled usage past the bound, and changes nothing", () => {
    const stored = { periodStart: PERIOD_START, periodEnd: PERIOD_END, units: 3n, overage: 0n, pending: 0n };
    const r = applyUsage(stored, 9_500n, use(1n, { maxUnsettled: 10_000n }));
    expect(r.reservation).toMatchObject({ ok: false, reason: "ExposureLimit", unsettled: 9_500n });
    expect(r.unsettled).toBe(9_500n);
    expect(r.cycle).toBeUndefined();
  });

  it("starts a new cycle when the chain's period begins at or after the stored period's end, keeping pending charges", () => {
    const stored = {
      periodStart: PERIOD_START,
      periodEnd: PERIOD_END,
      units: 9n,
      overage: 6_000n,
      pending: 2_000n,
    };
    const renewed = applyUsage(
      stored,
      2_000n,
      use(1n, { periodStart: PERIOD_END, periodEnd: PERIOD_END + 30 * DAY }),
    );
    expect(renewed.cycle).toEqual({
      periodStart: PERIOD_END,
      periodEnd: PERIOD_END + 30 * DAY,
      units: 1n,
      overage: 0n,
      pending: 2_000n,
    });
  });

  it("keeps the cycle when a resume shifts the period by the paused time, and never moves it back", () => {
    const stored = { periodStart: PERIOD_START, periodEnd: PERIOD_END, units: 3n, overage: 0n, pending: 0n };
    const shifted = applyUsage(
      stored,
      0n,
      use(1n, { periodStart: PERIOD_START + 5 * DAY, periodEnd: PERIOD_END + 5 * DAY }),
    );
    expect(shifted.reservation).toMatchObject({ ok: true, unitsUsed: 4n, charge: 1_000n });
    expect(shifted.cycle).toMatchObject({
      periodStart: PERIOD_START + 5 * DAY,
      periodEnd: PERIOD_END + 5 * DAY,
    });
    const stale = applyUsage(shifted.cycle, 0n, use(1n));
    expect(stale.cycle).toMatchObject({ periodStart: PERIOD_START + 5 * DAY, units: 5n });
  });
});

describe("usageRef", () => {
  it("is deterministic per ledger, batch and subscription and fits the facilitator's ref limit", () => {
    const ref = usageRef("a".repeat(32), "7", 42n);
    expect(ref).toMatch(/^tg[0-9a-f]{40}$/);
    expect(usageRef("a".repeat(32), "7", 42n)).toBe(ref);
    expect(usageRef("b".repeat(32), "7", 42n)).not.toBe(ref);
    expect(usageRef("a".repeat(32), "8", 42n)).not.toBe(ref);
  });
});

/** The contract of usageLedger.ts, run against each implementation. */
function contractSuite(
  setup: () => Promise<{ ledgers: [UsageLedger, UsageLedger]; clock: ReturnType<typeof createFixedClock> }>,
) {
  let ledgers: [UsageLedger, UsageLedger];
  let clock: ReturnType<typeof createFixedClock>;
  beforeAll(async () => {
    ({ ledgers, clock } = await setup());
  });

  const drain = async (ledger: UsageLedger) => {
    for (;;) {
      const batch = await ledger.claimBatch({ maxItems: 1000, staleMs: 60_000 });
      if (batch === undefined) return;
      await ledger.markBatchSent(batch.id);
      await ledger.resolve(batch.items.map((item) => ({ ref: item.ref, outcome: "settled" as const })));
    }
  };

  it("counts included units free and charges each use past them", async () => {
    const [ledger] = ledgers;
    const id = freshId();
    const results = [];
    for (let i = 0; i < 5; i++) results.push(await ledger.reserve(use(id)));
    expect(results.map((r) => (r.ok ? r.charge : -1n))).toEqual([0n, 0n, 0n, 1_000n, 1_000n]);
    expect(await ledger.cycle(id)).toMatchObject({ units: 5n, overage: 2_000n, pending: 2_000n });
    await drain(ledger);
  });

  it("charges a direct deduction against the cap, even within the included units (deductAllowance)", async () => {
    const [ledger, other] = ledgers;
    const id = freshId();
    // One use within the included units, then a direct charge: units stay free, the charge does not.
    expect(await ledger.reserve(use(id))).toEqual({ ok: true, unitsUsed: 1n, charge: 0n });
    expect(await other.reserve(use(id, { units: 0, charge: 3_000n }))).toEqual({
      ok: true,
      unitsUsed: 1n,
      charge: 3_000n,
    });
    // The cap (5 000) leaves 2 000: a direct charge of 2 001 is refused, 2 000 passes.
    expect(await ledger.reserve(use(id, { units: 0, charge: 2_001n }))).toMatchObject({
      ok: false,
      reason: "AllowanceExhausted",
      available: 2_000n,
    });
    expect(await ledger.reserve(use(id, { units: 0, charge: 2_000n }))).toMatchObject({ ok: true });
    expect(await ledger.cycle(id)).toMatchObject({ units: 1n, overage: 5_000n, pending: 5_000n });
    await drain(ledger);
  });

  it("admits exactly the uses the cap allows among concurrent reservations from two instances", async () => {
    const id = freshId();
    // 3 included + 5 000 / 1 000 = 5 overage units: 8 uses pass, whatever the interleaving.
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => ledgers[i % 2]!.reserve(use(id))));
    expect(results.filter((r) => r.ok)).toHaveLength(8);
    expect(results.filter((r) => !r.ok && r.reason === "AllowanceExhausted")).toHaveLength(12);
    const cycle = await ledgers[0].cycle(id);
    expect(cycle).toMatchObject({ units: 8n, overage: 5_000n, pending: 5_000n });
    await drain(ledgers[0]);
  });

  it("bounds unsettled usage across subscriptions and frees it as items are resolved", async () => {
    const [ledger] = ledgers;
    await drain(ledger);
    const base = await ledger.unsettled();
    const bound = base + 2_000n;
    const a = freshId();
    const b = freshId();
    for (const id of [a, b])
      for (let i = 0; i < 3; i++) await ledger.reserve(use(id, { maxUnsettled: bound }));
    expect(await ledger.reserve(use(a, { maxUnsettled: bound }))).toMatchObject({ ok: true, charge: 1_000n });
    expect(await ledger.reserve(use(b, { maxUnsettled: bound }))).toMatchObject({ ok: true, charge: 1_000n });
    expect(await ledger.reserve(use(a, { maxUnsettled: bound }))).toMatchObject({
      ok: false,
      reason: "ExposureLimit",
    });
    expect(await ledger.unsettled()).toBe(bound);

    const batch = await ledger.claimBatch({ maxItems: 1000, staleMs: 60_000 });
    expect(batch?.items.map((item) => item.amount)).toEqual([1_000n, 1_000n]);
    // Claimed and sent, but not settled: still exposure.
    await ledger.markBatchSent(batch!.id);
    expect(await ledger.unsettled()).toBe(bound);
    expect(await ledger.resolve([{ ref: batch!.items[0]!.ref, outcome: "settled" }])).toBe(1);
    expect(await ledger.resolve([{ ref: batch!.items[0]!.ref, outcome: "settled" }])).toBe(0);
    expect(await ledger.unsettled()).toBe(bound - 1_000n);
    expect(await ledger.reserve(use(a, { maxUnsettled: bound }))).toMatchObject({ ok: true, charge: 1_000n });
    await ledger.resolve([{ ref: batch!.items[1]!.ref, outcome: "failed" }]);
    await drain(ledger);
    expect(await ledger.unsettled()).toBe(base);
  });

  it("puts one item per subscription with the summed amount into a batch, and sends it once", async () => {
    const [ledger, other] = ledgers;
    await drain(ledger);
    const a = freshId();
    const b = freshId();
    for (let i = 0; i < 6; i++) await ledger.reserve(use(a, { includedUnits: 0n }));
    for (let i = 0; i < 2; i++) await other.reserve(use(b, { includedUnits: 0n }));
    const batch = await ledger.claimBatch({ maxItems: 1000, staleMs: 60_000 });
    const bySubscription = new Map(batch?.items.map((item) => [item.subscriptionId, item.amount]));
    expect(bySubscription.get(a)).toBe(5_000n);
    expect(bySubscription.get(b)).toBe(2_000n);
    expect(new Set(batch?.items.map((item) => item.ref)).size).toBe(batch?.items.length);
    // Nothing else is pending, and a fresh claim does not hand the same batch out again.
    expect(await other.claimBatch({ maxItems: 1000, staleMs: 60_000 })).toBeUndefined();
    await ledger.markBatchSent(batch!.id);
    clock.advance(120_000);
    expect(await other.claimBatch({ maxItems: 1000, staleMs: 60_000 })).toBeUndefined();
    await ledger.resolve(batch!.items.map((item) => ({ ref: item.ref, outcome: "settled" as const })));
  });

  it("hands a claimed batch never marked sent out again, with the same refs, once it is stale", async () => {
    const [ledger, other] = ledgers;
    await drain(ledger);
    const id = freshId();
    await ledger.reserve(use(id, { includedUnits: 0n }));
    const first = await ledger.claimBatch({ maxItems: 10, staleMs: 30_000 });
    expect(first?.items).toHaveLength(1);
    expect(await other.claimBatch({ maxItems: 10, staleMs: 30_000 })).toBeUndefined();
    clock.advance(30_000);
    const again = await other.claimBatch({ maxItems: 10, staleMs: 30_000 });
    expect(again).toEqual(first);
    await other.markBatchSent(again!.id);
    clock.advance(10_000);
    expect(await ledger.unresolved({ olderThanMs: 5_000, limit: 10 })).toEqual(first!.items);
    await ledger.resolve(first!.items.map((item) => ({ ref: item.ref, outcome: "settled" as const })));
    expect(await ledger.unresolved({ olderThanMs: 0, limit: 10 })).toEqual([]);
  });

  it("resolves an item reported settled before its batch was marked sent, and does not reopen it", async () => {
    const [ledger] = ledgers;
    await drain(ledger);
    const before = await ledger.unsettled();
    await ledger.reserve(use(freshId(), { includedUnits: 0n }));
    const batch = await ledger.claimBatch({ maxItems: 10, staleMs: 30_000 });
    await ledger.resolve(batch!.items.map((item) => ({ ref: item.ref, outcome: "settled" as const })));
    await ledger.markBatchSent(batch!.id);
    expect(await ledger.unsettled()).toBe(before);
    expect(await ledger.unresolved({ olderThanMs: 0, limit: 10 })).toEqual([]);
  });

  it("resets the included units at renewal but not when a resume shifts the period", async () => {
    const [ledger] = ledgers;
    const id = freshId();
    for (let i = 0; i < 3; i++) await ledger.reserve(use(id));
    const shift = 2 * DAY;
    expect(
      await ledger.reserve(use(id, { periodStart: PERIOD_START + shift, periodEnd: PERIOD_END + shift })),
    ).toMatchObject({
      charge: 1_000n,
    });
    expect(
      await ledger.reserve(
        use(id, { periodStart: PERIOD_END + shift, periodEnd: PERIOD_END + shift + 30 * DAY }),
      ),
    ).toMatchObject({
      ok: true,
      unitsUsed: 1n,
      charge: 0n,
    });
    await drain(ledger);
  });
}

describe("createMemoryUsageLedger", () => {
  contractSuite(async () => {
    const clock = createFixedClock(T0);
    const ledger = createMemoryUsageLedger({ clock });
    return { ledgers: [ledger, ledger], clock };
  });
});

describe("createPostgresUsageLedger (PGlite, or PostgreSQL when DATABASE_URL is set)", () => {
  let store: Store;
  afterAll(async () => {
    await store?.close();
  });
  contractSuite(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
    const clock = createFixedClock(T0);
    return {
      ledgers: [
        await createPostgresUsageLedger(store, { clock }),
        await createPostgresUsageLedger(store, { clock }),
      ],
      clock,
    };
  });

  it("keeps ledgers of different names apart", async () => {
    const clock = createFixedClock(T0);
    const one = await createPostgresUsageLedger(store, { name: "api-one", clock });
    const two = await createPostgresUsageLedger(store, { name: "api-two", clock });
    const id = freshId();
    for (let i = 0; i < 4; i++) await one.reserve(use(id));
    expect(await one.cycle(id)).toMatchObject({ units: 4n });
    expect(await two.cycle(id)).toBeUndefined();
    expect(await two.unsettled()).toBe(0n);
  });
});
