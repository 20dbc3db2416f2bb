/**
 * The voucher stores' shared contract (src/schemes/channel/voucherStore.ts) on every backend: memory,
 * the journal, PGlite (or PostgreSQL when DATABASE_URL is set) and Redis when REDIS_URL is set; and the
 * journal's recovery after its process is gone.
 */
import { randomBytes } from "node:crypto";
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Hex } from "viem";
import { afterAll, describe, expect, it } from "vitest";
import { createJournalVoucherStore } from "../src/schemes/channel/gate/journalVoucherStore.ts";
import { createPostgresVoucherStore } from "../src/schemes/channel/gate/postgresVoucherStore.ts";
import { createRedisVoucherStore } from "../src/schemes/channel/gate/redisVoucherStore.ts";
import { createMemoryVoucherStore, type VoucherStore } from "../src/schemes/channel/gate/voucherStore.ts";
import { createTestStore } from "../src/store/createTestStore.ts";

const REDIS_URL = process.env.REDIS_URL || undefined;
const dir = mkdtempSync(join(tmpdir(), "tollgate-vouchers-"));
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const newId = (): Hex => `0x${randomBytes(32).toString("hex")}`;
const sig = (n: number) => new Uint8Array(64).fill(n);

type Backend = { name: string; open(): Promise<VoucherStore>; skip?: boolean };
const backends: Backend[] = [
  { name: "memory", open: async () => createMemoryVoucherStore() },
  {
    name: "journal",
    open: async () =>
      createJournalVoucherStore({ path: join(dir, `j-${randomBytes(4).toString("hex")}.journal`) }),
  },
  {
    name: process.env.DATABASE_URL ? "PostgreSQL" : "PGlite",
    async open() {
      const db = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
      cleanups.push(() => db.close());
      return createPostgresVoucherStore(db);
    },
  },
  {
    name: "Redis",
    skip: REDIS_URL === undefined,
    open: () =>
      createRedisVoucherStore({ url: REDIS_URL!, prefix: `test:channel:${randomBytes(4).toString("hex")}:` }),
  },
];

describe.each(backends.filter((b) => b.skip !== true))("$name voucher store", (backend) => {
  const withStore = async (fn: (store: VoucherStore) => Promise<void>) => {
    const store = await backend.open();
    try {
      await fn(store);
    } finally {
      await store.close();
    }
  };

  it("charges a voucher that covers spent + price and refuses one that does not", () =>
    withStore(async (store) => {
      const id = newId();
      expect(await store.tally(id)).toBeUndefined();
      expect(
        await store.charge({
          channelId: id,
          cumulativeAmount: 999n,
          signature: sig(1),
          price: 1000n,
          floor: 0n,
        }),
      ).toEqual({
        charged: false,
        tally: { highest: 0n, spent: 0n },
      });
      expect(
        await store.charge({
          channelId: id,
          cumulativeAmount: 1000n,
          signature: sig(1),
          price: 1000n,
          floor: 0n,
        }),
      ).toEqual({
        charged: true,
        tally: { highest: 1000n, spent: 1000n },
      });
      expect(
        await store.charge({
          channelId: id,
          cumulativeAmount: 1000n,
          signature: sig(1),
          price: 1000n,
          floor: 0n,
        }),
      ).toEqual({
        charged: false,
        tally: { highest: 1000n, spent: 1000n },
      });
      expect(await store.tally(id)).toEqual({ highest: 1000n, spent: 1000n });
    }));

  it("keeps amounts beyond 2^64 exact", () =>
    withStore(async (store) => {
      const id = newId();
      const big = 2n ** 200n + 7n;
      const r = await store.charge({
        channelId: id,
        cumulativeAmount: big,
        signature: sig(2),
        price: 2n ** 199n,
        floor: 2n ** 198n,
      });
      expect(r).toEqual({ charged: true, tally: { highest: big, spent: 2n ** 198n + 2n ** 199n } });
      await store.refund(id, 2n ** 199n + 5n);
      expect(await store.tally(id)).toEqual({ highest: big, spent: 2n ** 198n });
    }));

  it("of many concurrent charges on one channel, serves exactly as many as the vouchers pay for", () =>
    withStore(async (store) => {
      const id = newId();
      // 40 requests, vouchers 1..30 × price, in a shuffled order: exactly 30 can be charged.
      const amounts = Array.from({ length: 40 }, (_, i) => BigInt((i % 30) + 1) * 10n);
      amounts.sort(() => Math.random() - 0.5);
      const results = await Promise.all(
        amounts.map((a) =>
          store.charge({ channelId: id, cumulativeAmount: a, signature: sig(3), price: 10n, floor: 0n }),
        ),
      );
      expect(results.filter((r) => r.charged)).toHaveLength(30);
      expect(await store.tally(id)).toEqual({ highest: 300n, spent: 300n });
    }));

  it("lists the highest voucher until it is marked forwarded, and again once a higher one arrives", () =>
    withStore(async (store) => {
      const id = newId();
      const other = newId();
      await store.charge({ channelId: id, cumulativeAmount: 10n, signature: sig(4), price: 10n, floor: 0n });
      await store.charge({ channelId: id, cumulativeAmount: 20n, signature: sig(5), price: 10n, floor: 0n });
      await store.charge({ channelId: other, cumulativeAmount: 5n, signature: sig(6), price: 5n, floor: 0n });
      const pending = await store.unforwarded(100);
      expect(pending.find((v) => v.channelId === id)).toEqual({
        channelId: id,
        cumulativeAmount: 20n,
        signature: sig(5),
      });
      await store.markForwarded(id, 20n);
      await store.markForwarded(other, 4n); // below what it holds: still pending
      expect((await store.unforwarded(100)).map((v) => v.channelId)).toEqual([other]);
      await store.markForwarded(id, 10n); // lower than recorded: ignored
      await store.charge({ channelId: id, cumulativeAmount: 30n, signature: sig(7), price: 10n, floor: 0n });
      const again = await store.unforwarded(100);
      expect(again.find((v) => v.channelId === id)).toEqual({
        channelId: id,
        cumulativeAmount: 30n,
        signature: sig(7),
      });
    }));

  it("does not list a channel whose vouchers never rose above its floor", () =>
    withStore(async (store) => {
      const id = newId();
      await store.charge({
        channelId: id,
        cumulativeAmount: 50n,
        signature: sig(8),
        price: 10n,
        floor: 100n,
      });
      expect((await store.unforwarded(100)).map((v) => v.channelId)).not.toContain(id);
      const next = await store.charge({
        channelId: id,
        cumulativeAmount: 110n,
        signature: sig(8),
        price: 10n,
        floor: 100n,
      });
      expect(next).toEqual({ charged: true, tally: { highest: 110n, spent: 110n } });
    }));

  it("refunds never below the floor and keeps the voucher", () =>
    withStore(async (store) => {
      const id = newId();
      await store.charge({
        channelId: id,
        cumulativeAmount: 130n,
        signature: sig(9),
        price: 20n,
        floor: 100n,
      });
      await store.refund(id, 50n);
      expect(await store.tally(id)).toEqual({ highest: 130n, spent: 100n });
      expect((await store.unforwarded(10)).find((v) => v.channelId === id)?.cumulativeAmount).toBe(130n);
    }));

  it("seals a channel for a cooperative close: every charge that passed is in the final tally, none passes after", () =>
    withStore(async (store) => {
      const id = newId();
      await store.charge({ channelId: id, cumulativeAmount: 100n, signature: sig(1), price: 10n, floor: 0n });
      // Charges racing the seal: each one either is in the tally the seal returns or is refused as sealed.
      const charges = Array.from({ length: 12 }, (_, i) =>
        store.charge({
          channelId: id,
          cumulativeAmount: 100n + BigInt(i) * 10n,
          signature: sig(i + 2),
          price: 10n,
          floor: 0n,
        }),
      );
      const sealing = store.seal(id, 0n);
      const outcomes = await Promise.all(charges);
      const final = await sealing;
      const passed = outcomes.filter((o) => o.charged).length;
      expect(final.spent).toBe(10n + 10n * BigInt(passed));
      expect(outcomes.filter((o) => !o.charged).every((o) => o.sealed === true)).toBe(true);
      const late = await store.charge({
        channelId: id,
        cumulativeAmount: 10_000n,
        signature: sig(40),
        price: 10n,
        floor: 0n,
      });
      expect(late).toMatchObject({ charged: false, sealed: true, tally: final });
      expect(await store.tally(id)).toEqual(final);
      // Sealing again changes nothing; the final voucher is still handed over.
      expect(await store.seal(id, 0n)).toEqual(final);
      expect((await store.unforwarded(10)).find((v) => v.channelId === id)?.cumulativeAmount).toBe(
        final.highest,
      );
    }));

  it("seals a channel it never charged at its floor and lists nothing to forward for it", () =>
    withStore(async (store) => {
      const id = newId();
      expect(await store.seal(id, 500n)).toEqual({ highest: 500n, spent: 500n });
      expect(
        await store.charge({
          channelId: id,
          cumulativeAmount: 600n,
          signature: sig(1),
          price: 10n,
          floor: 500n,
        }),
      ).toMatchObject({ charged: false, sealed: true });
      expect((await store.unforwarded(10)).some((v) => v.channelId === id)).toBe(false);
    }));

  it("names itself by one 8-byte tag, the same every time it is asked, and another store by another", async () => {
    const first = await backend.open();
    const second = await backend.open();
    try {
      const tag = await first.tag();
      expect(tag).toMatch(/^0x[0-9a-f]{16}$/);
      expect(await first.tag()).toBe(tag);
      expect(await second.tag()).not.toBe(tag);
    } finally {
      await first.close();
      await second.close();
    }
  });
});

describe("store tags shared by instances", () => {
  it("gives every instance on one database the same tag, made once", async () => {
    const db = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const tags = await Promise.all([1, 2, 3].map(() => createPostgresVoucherStore(db).tag()));
      expect(new Set(tags).size).toBe(1);
      expect(await createPostgresVoucherStore(db).tag()).toBe(tags[0]);
    } finally {
      await db.close();
    }
  });

  it.skipIf(REDIS_URL === undefined)("gives every instance on one Redis namespace the same tag", async () => {
    const prefix = `test:channel:${randomBytes(4).toString("hex")}:`;
    const stores = await Promise.all([1, 2].map(() => createRedisVoucherStore({ url: REDIS_URL!, prefix })));
    try {
      const tags = await Promise.all(stores.map((s) => s.tag()));
      expect(tags[0]).toMatch(/^0x[0-9a-f]{16}$/);
      expect(tags[1]).toBe(tags[0]);
    } finally {
      for (const s of stores) await s.close();
    }
  });
});

describe("journal voucher store recovery", () => {
  it("recovers every channel's tally and pending voucher after reopening, ignoring a torn last line", async () => {
    const path = join(dir, "recover.journal");
    const first = await createJournalVoucherStore({ path });
    const a = newId();
    const b = newId();
    await first.charge({ channelId: a, cumulativeAmount: 10n, signature: sig(1), price: 10n, floor: 0n });
    await first.charge({ channelId: a, cumulativeAmount: 20n, signature: sig(2), price: 10n, floor: 0n });
    await first.charge({ channelId: b, cumulativeAmount: 7n, signature: sig(3), price: 7n, floor: 0n });
    await first.markForwarded(b, 7n);
    const tag = await first.tag();
    await first.close();
    appendFileSync(path, `C ${a} 999 999 0 0 AAAA`); // torn: no signature, no newline
    const second = await createJournalVoucherStore({ path });
    // The journal keeps its tag: a restarted gate goes on serving the channels opened for it.
    expect(await second.tag()).toBe(tag);
    expect(await second.tally(a)).toEqual({ highest: 20n, spent: 20n });
    expect(await second.tally(b)).toEqual({ highest: 7n, spent: 7n });
    expect(await second.unforwarded(10)).toEqual([
      { channelId: a, cumulativeAmount: 20n, signature: sig(2) },
    ]);
    // Compacted on open: the tag, then one line per channel.
    expect(readFileSync(path, "utf8").trim().split("\n")).toEqual([
      `T ${tag}`,
      expect.stringMatching(/^C /),
      expect.stringMatching(/^C /),
    ]);
    await second.close();
  });

  it("keeps a seal across reopening, also for a channel sealed before any voucher", async () => {
    const path = join(dir, "sealed.journal");
    const first = await createJournalVoucherStore({ path });
    const a = newId();
    const b = newId();
    await first.charge({ channelId: a, cumulativeAmount: 30n, signature: sig(1), price: 10n, floor: 0n });
    await first.seal(a, 0n);
    await first.seal(b, 4n);
    await first.close();
    const second = await createJournalVoucherStore({ path });
    expect(
      await second.charge({ channelId: a, cumulativeAmount: 30n, signature: sig(1), price: 10n, floor: 0n }),
    ).toMatchObject({ charged: false, sealed: true, tally: { highest: 30n, spent: 10n } });
    expect(
      await second.charge({ channelId: b, cumulativeAmount: 30n, signature: sig(2), price: 10n, floor: 4n }),
    ).toMatchObject({ charged: false, sealed: true, tally: { highest: 4n, spent: 4n } });
    expect(await second.unforwarded(10)).toEqual([
      { channelId: a, cumulativeAmount: 30n, signature: sig(1) },
    ]);
    await second.close();
  });

  it("refuses a second opener of the same journal while the first holds it", async () => {
    const path = join(dir, "locked.journal");
    const first = await createJournalVoucherStore({ path });
    await expect(createJournalVoucherStore({ path })).rejects.toThrow();
    await first.close();
    const again = await createJournalVoucherStore({ path });
    await again.close();
  });
});
