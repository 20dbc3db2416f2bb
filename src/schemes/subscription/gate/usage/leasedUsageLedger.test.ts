import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import type { Clock } from "../../../../protocol/clock.ts";
import { createTestStore } from "../../../../store/createTestStore.ts";
import type { Store } from "../../../../store/store.ts";
import { createLeasedUsageLedger, type LeasedUsageLedger } from "./createLeasedUsageLedger.ts";
import { createPostgresUsageLedger } from "./createPostgresUsageLedger.ts";
import { createRedisUsageLedger } from "./createRedisUsageLedger.ts";
import type { SharedUsageLedger } from "./usageLeases.ts";
import type { UsageRequest } from "./usageLedger.ts";

/** How long the abandoned lease lives. */
const LEASE_MS = 3_000;

const clock: Clock = { now: () => Date.now() };
const INCLUDED = 20n;
const PRICE = 1_000n;
/** 150 units of overage: the cap is 170 units a cycle. */
const CAP_UNITS = 170;

const request = (subscriptionId: bigint, units = 1): UsageRequest => ({
  subscriptionId,
  periodStart: 1_000,
  periodEnd: 2_000,
  units,
  includedUnits: INCLUDED,
  unitPrice: PRICE,
  maxOverage: 150n * PRICE,
  overageUsed: 0n,
  maxUnsettled: 10n ** 18n,
});

const owed = (units: number) => BigInt(Math.max(0, units - Number(INCLUDED))) * PRICE;

async function pendingAfterFlush(shared: SharedUsageLedger): Promise<bigint> {
  let total = 0n;
  for (;;) {
    const batch = await shared.claimBatch({ maxItems: 100, staleMs: 60_000 });
    if (batch === undefined) return total;
    for (const item of batch.items) total += item.amount;
    await shared.markBatchSent(batch.id);
  }
}

function leasedSuite(
  open: () => Promise<{ shared: () => Promise<SharedUsageLedger>; close(): Promise<void> }>,
) {
  let close: (() => Promise<void>) | undefined;
  afterAll(async () => {
    await close?.();
  });
  /** Opens the ledger once more for a test, closed after the suite with the ones before it. */
  const openAnother = async () => {
    const opened = await open();
    const previous = close;
    close = async () => {
      await previous?.();
      await opened.close();
    };
    return opened;
  };

  it("holds the cap exactly across three instances under 200 concurrent uses, charging count-based", {
    timeout: 180_000,
  }, async () => {
    const opened = await open();
    close = opened.close;
    const shared = await opened.shared();
    const instances: LeasedUsageLedger[] = [];
    for (let i = 0; i < 3; i++) {
      instances.push(createLeasedUsageLedger({ shared: await opened.shared(), clock, idleMs: 20 }));
    }
    const id = BigInt(randomBytes(4).readUInt32BE());
    // Each use is retried while its room sits on another instance's lease, as a client would on 429.
    const use = async (i: number) => {
      for (;;) {
        const reservation = await instances[i % 3]!.reserve(request(id));
        if (reservation.ok) return reservation;
        if (reservation.reason !== "Leased") return reservation;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    };
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => use(i)));
    const served = results.filter((r) => r.ok).length;
    expect(served).toBe(CAP_UNITS);
    expect(results.filter((r) => !r.ok && r.reason === "AllowanceExhausted")).toHaveLength(200 - CAP_UNITS);
    for (const instance of instances) await instance.close();
    const cycle = await shared.cycle(id);
    expect(cycle?.units).toBe(BigInt(CAP_UNITS));
    expect(cycle?.overage).toBe(owed(CAP_UNITS));
    expect(await pendingAfterFlush(shared)).toBe(owed(CAP_UNITS));
    expect(await shared.unsettled()).toBe(owed(CAP_UNITS));
  });

  it("reclaims an abandoned lease at its expiry with exactly its persisted units and refuses its late spends", async () => {
    const opened = await openAnother();
    const shared = await opened.shared();
    const id = BigInt(randomBytes(4).readUInt32BE());
    // A lease long enough that the steps before its expiry finish on a loaded machine (CI runs every
    // suite at once): the checks below need it alive until the wait.
    const acquired = await shared.acquire(request(id), 16, LEASE_MS);
    const lease = acquired.lease;
    if (lease === undefined) throw new Error("expected a lease");
    expect(await shared.spend([{ leaseId: lease.id, units: 4n }])).toEqual(new Set([lease.id]));
    // The holder dies here: 5 units answered (the first use and 4), 11 never used.
    expect((await shared.cycle(id))?.units).toBe(0n);
    expect(await shared.reclaimExpired(10)).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));
    expect(await shared.spend([{ leaseId: lease.id, units: 1n }])).toEqual(new Set());
    expect(await shared.reclaimExpired(10)).toBe(1);
    expect(await shared.reclaimExpired(10)).toBe(0);
    expect(await shared.spend([{ leaseId: lease.id, units: 1n }])).toEqual(new Set());
    await shared.release(lease.id);
    expect((await shared.cycle(id))?.units).toBe(5n);
    // The room came back: the rest of the cap is usable directly.
    const rest = await Promise.all(Array.from({ length: CAP_UNITS }, () => shared.reserve(request(id))));
    expect(rest.filter((r) => r.ok)).toHaveLength(CAP_UNITS - 5);
    expect((await shared.cycle(id))?.overage).toBe(owed(CAP_UNITS));
  });

  it("ends leases returned together exactly as it ends them one at a time", async () => {
    const opened = await openAnother();
    const shared = await opened.shared();
    const base = BigInt(randomBytes(3).readUIntBE(0, 3)) * 10n;
    // Two subscriptions, each with two leases spent partly, across the included units' edge (20).
    const leaseUp = async (offset: bigint) => {
      const ids: string[] = [];
      for (const [id, spends] of [
        [base + offset, [5n, 9n]],
        [base + offset + 1n, [15n, 3n]],
      ] as const) {
        for (const spent of spends) {
          const { lease } = await shared.acquire(request(id), 16, 60_000);
          if (lease === undefined) throw new Error("expected a lease");
          expect(await shared.spend([{ leaseId: lease.id, units: spent }])).toEqual(new Set([lease.id]));
          ids.push(lease.id);
        }
      }
      return ids;
    };
    const together = await leaseUp(0n);
    const apart = await leaseUp(2n);
    await Promise.all(together.map((id) => shared.release(id)));
    for (const id of apart) await shared.release(id);
    // First uses (1 each) plus the spends: 1+5 + 1+9 = 16 and 1+15 + 1+3 = 20 units.
    for (const [offset, units] of [
      [0n, 16n],
      [1n, 20n],
    ] as const) {
      const one = await shared.cycle(base + offset);
      expect(one).toEqual(await shared.cycle(base + offset + 2n));
      expect(one?.units).toBe(units);
      expect(one?.overage).toBe(owed(Number(units)));
    }
    // Every block's worst charge left the exposure and only the real charges stayed.
    expect(await shared.unsettled()).toBe(2n * (owed(16) + owed(20)));
    expect(await pendingAfterFlush(shared)).toBe(2n * (owed(16) + owed(20)));
  });

  it("writes spends as many at a time as the store takes, never one lease in two, and counts every use answered", async () => {
    const opened = await openAnother();
    const real = await opened.shared();
    // The real ledger, its spend writes watched: which leases each write in flight carries.
    const inFlight: Set<string>[] = [];
    let overlaps = 0;
    let mostAtOnce = 0;
    const shared: SharedUsageLedger = Object.assign(Object.create(real) as SharedUsageLedger, {
      async spend(spends: Parameters<SharedUsageLedger["spend"]>[0]) {
        const leases = new Set(spends.map((s) => s.leaseId));
        for (const other of inFlight) for (const id of leases) if (other.has(id)) overlaps++;
        inFlight.push(leases);
        mostAtOnce = Math.max(mostAtOnce, inFlight.length);
        try {
          return await real.spend(spends);
        } finally {
          inFlight.splice(inFlight.indexOf(leases), 1);
        }
      },
    });
    const ledger = createLeasedUsageLedger({ shared, clock });
    const base = BigInt(randomBytes(3).readUIntBE(0, 3)) * 10n;
    let next = 0;
    const answered = new Map<bigint, number>();
    const worker = async () => {
      for (let i = 0; i < 30; i++) {
        const id = base + BigInt(next++ % 4);
        const reservation = await ledger.reserve({ ...request(id), maxOverage: 10n ** 30n });
        expect(reservation.ok).toBe(true);
        answered.set(id, (answered.get(id) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    await ledger.close();
    expect(overlaps).toBe(0);
    // PostgreSQL takes two at a time, Redis one.
    expect(mostAtOnce).toBe(real.spendWrites ?? 1);
    for (const [id, uses] of answered) expect((await real.cycle(id))?.units).toBe(BigInt(uses));
  });

  it("sizes the next lease by demand: four times larger after one was used up, kept when a flush hands it back", async () => {
    const opened = await openAnother();
    const ledger = createLeasedUsageLedger({ shared: await opened.shared(), clock, minLeaseUnits: 8 });
    const wide = { ...request(BigInt(randomBytes(4).readUInt32BE())), maxOverage: 10n ** 30n };
    for (let i = 0; i < 8; i++) expect((await ledger.reserve(wide)).ok).toBe(true);
    // The first lease (8 units) is used up: the next one is 32.
    expect((await ledger.reserve(wide)).ok).toBe(true);
    expect(ledger.leases()).toEqual([expect.objectContaining({ units: 32n, spent: 1n })]);
    // A flush hands it back barely spent; that says nothing of demand, so the next is 32 again.
    await ledger.returnLeases();
    expect(ledger.leases()).toEqual([]);
    expect((await ledger.reserve(wide)).ok).toBe(true);
    expect(ledger.leases()).toEqual([expect.objectContaining({ units: 32n, spent: 1n })]);
    await ledger.close();
  });

  it("answers Leased, not AllowanceExhausted, while the missing room sits on a live lease", async () => {
    const opened = await openAnother();
    const shared = await opened.shared();
    const id = BigInt(randomBytes(4).readUInt32BE());
    const small = { ...request(id), maxOverage: 0n, unitPrice: 0n };
    const acquired = await shared.acquire(small, 1_000, 60_000);
    expect(acquired.lease?.units).toBe(5n);
    for (let i = 0; i < 15; i++) expect((await shared.reserve(small)).ok).toBe(true);
    expect(await shared.reserve(small)).toMatchObject({ ok: false, reason: "Leased" });
    // The lease comes back with its first use spent: 4 units of room return.
    await shared.release(acquired.lease!.id);
    for (let i = 0; i < 4; i++) expect((await shared.reserve(small)).ok).toBe(true);
    expect(await shared.reserve(small)).toMatchObject({ ok: false, reason: "AllowanceExhausted" });
    expect((await shared.cycle(id))?.units).toBe(20n);
  });
}

describe.runIf(process.env.DATABASE_URL)("leased usage ledger over PostgreSQL, many connections", () => {
  it("grants leases to 64 new subscriptions from 16 concurrent uses without deadlocking", {
    timeout: 120_000,
  }, async () => {
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const ledger = createLeasedUsageLedger({
        shared: await createPostgresUsageLedger(store, { name: `many-${randomBytes(4).toString("hex")}` }),
        clock,
      });
      let next = 0;
      const worker = async () => {
        const outcomes: boolean[] = [];
        for (let i = 0; i < 40; i++) {
          const id = BigInt(1 + (next++ % 64));
          outcomes.push((await ledger.reserve({ ...request(id), maxOverage: 10n ** 30n })).ok);
        }
        return outcomes;
      };
      const outcomes = (await Promise.all(Array.from({ length: 16 }, worker))).flat();
      expect(outcomes.every(Boolean)).toBe(true);
      await ledger.close();
    } finally {
      await store.close();
    }
  });
});

describe.runIf(process.env.DATABASE_URL)("PostgreSQL usage ledger and its shared row", () => {
  it("grants, spends and returns a lease within the included units while another transaction holds the ledger row", {
    timeout: 60_000,
  }, async () => {
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const name = `row-${randomBytes(4).toString("hex")}`;
    const shared = await createPostgresUsageLedger(store, { name, clock });
    let letGo!: () => void;
    const holding = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let rowLocked!: () => void;
    const locked = new Promise<void>((resolve) => {
      rowLocked = resolve;
    });
    // Another instance mid-way through a charge: the exposure row locked as a write locks it.
    const holder = store.transaction(async (tx) => {
      await tx.query("SELECT 1 FROM gate_usage_ledgers WHERE name = $1 FOR NO KEY UPDATE", [name]);
      rowLocked();
      await holding;
    });
    try {
      await locked;
      const within = async <T>(work: Promise<T>): Promise<T> => {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("waited for the ledger row")), 5_000);
        });
        try {
          return await Promise.race([work, late]);
        } finally {
          clearTimeout(timer);
        }
      };
      const id = BigInt(randomBytes(4).readUInt32BE());
      // 8 units from 0: all within the 20 included, so the block can charge nothing.
      const { lease } = await within(shared.acquire(request(id), 8, 60_000));
      if (lease === undefined) throw new Error("expected a lease");
      expect(lease.worst).toBe(0n);
      expect(await within(shared.spend([{ leaseId: lease.id, units: 3n }]))).toEqual(new Set([lease.id]));
      await within(shared.release(lease.id));
      expect((await shared.cycle(id))?.units).toBe(4n);
    } finally {
      letGo();
      await holder;
      await store.close();
    }
  });
});

describe("leased usage ledger over PGlite (PostgreSQL when DATABASE_URL is set)", () => {
  leasedSuite(async () => {
    const store: Store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
    const name = `leases-${randomBytes(4).toString("hex")}`;
    return { shared: () => createPostgresUsageLedger(store, { name, clock }), close: () => store.close() };
  });
});

describe.runIf(process.env.REDIS_URL)("leased usage ledger over Redis", () => {
  leasedSuite(async () => {
    const name = `leases-${randomBytes(4).toString("hex")}`;
    const opened: { close(): Promise<void> }[] = [];
    return {
      shared: async () => {
        const ledger = await createRedisUsageLedger({ url: process.env.REDIS_URL!, name, clock });
        opened.push(ledger);
        return ledger;
      },
      close: async () => {
        for (const ledger of opened) await ledger.close();
      },
    };
  });
});
