import { randomBytes } from "node:crypto";
import { createClient } from "redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock, systemClock } from "../protocol/clock.ts";
import { isTollgateError } from "../protocol/errors.ts";
import { createMemoryReplayGuard } from "./createMemoryReplayGuard.ts";
import { createPostgresReplayGuard } from "./createPostgresReplayGuard.ts";
import { createRedisReplayGuard } from "./createRedisReplayGuard.ts";
import { createStore } from "./createStore.ts";
import { createTestStore } from "./createTestStore.ts";
import type { ReplayGuard } from "./replayGuard.ts";
import type { Store } from "./store.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;
const redisUrl = process.env.REDIS_URL || undefined;

const T0 = 1_763_800_000_000;

/**
 * Two guards over one backend (the same guard twice for a single-process backend), a clock's now, and
 * a way to move that clock (shared by both guards).
 */
type Setup = { guards: [ReplayGuard, ReplayGuard]; now: () => number; advance(ms: number): void };

/** A claim for `request` with a 1 s lease. */
const claimFor = (request: string, maxClaims = 3) => ({ request, leaseMs: 1_000, maxClaims });

/** The contract of replayGuard.ts, run against each implementation. */
function contractSuite(setup: () => Promise<Setup>) {
  let s: Setup;
  beforeAll(async () => {
    s = await setup();
  });
  const memo = () => `memo.${randomBytes(12).toString("base64url")}`;

  it("returns true exactly once among 100 concurrent consumes of one key", async () => {
    const key = memo();
    const results = await Promise.all(
      Array.from({ length: 100 }, () => s.guards[0].consume(key, s.now() + 60_000)),
    );
    expect(results.filter(Boolean)).toHaveLength(1);
  });

  it("accepts a key exactly once between two guard instances sharing the backend", async () => {
    const keys = Array.from({ length: 20 }, memo);
    const attempts = keys.flatMap((key) =>
      [0, 1, 0, 1].map((i) =>
        s.guards[i as 0 | 1].consume(key, s.now() + 60_000).then((won) => ({ key, won })),
      ),
    );
    const results = await Promise.all(attempts);
    for (const key of keys) {
      expect(results.filter((r) => r.key === key && r.won)).toHaveLength(1);
    }
  });

  it("accepts distinct keys independently", async () => {
    const [a, b] = [memo(), memo()];
    expect(await s.guards[0].consume(a, s.now() + 60_000)).toBe(true);
    expect(await s.guards[0].consume(b, s.now() + 60_000)).toBe(true);
    expect(await s.guards[1].consume(a, s.now() + 60_000)).toBe(false);
  });

  it("refuses a key whose expiry has already passed, and keeps refusing it", async () => {
    const key = memo();
    expect(await s.guards[0].consume(key, s.now() - 1)).toBe(false);
    expect(await s.guards[0].consume(key, s.now())).toBe(false);
  });

  it("lets exactly one later consume succeed after a release, even between two instances", async () => {
    const key = memo();
    expect(await s.guards[0].consume(key, s.now() + 60_000)).toBe(true);
    await s.guards[0].release(key);
    const again = await Promise.all(
      [0, 1, 0, 1, 0, 1].map((i) => s.guards[i as 0 | 1].consume(key, s.now() + 60_000)),
    );
    expect(again.filter(Boolean)).toHaveLength(1);
    expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
  });

  it("releases only the key it is given", async () => {
    const [a, b] = [memo(), memo()];
    expect(await s.guards[0].consume(a, s.now() + 60_000)).toBe(true);
    expect(await s.guards[0].consume(b, s.now() + 60_000)).toBe(true);
    await s.guards[1].release(a);
    expect(await s.guards[1].consume(b, s.now() + 60_000)).toBe(false);
    expect(await s.guards[1].consume(a, s.now() + 60_000)).toBe(true);
  });

  it("treats the release of a key it does not hold as a no-op", async () => {
    const key = memo();
    await s.guards[0].release(key);
    await s.guards[0].release(key);
    expect(await s.guards[0].consume(key, s.now() + 60_000)).toBe(true);
    await s.guards[1].release(memo());
    expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
  });

  describe("claims", () => {
    const claim = (i: 0 | 1, key: string, request = "GET /a", maxClaims = 3) =>
      s.guards[i].claim!(key, s.now() + 60_000, claimFor(request, maxClaims));
    const won = (outcomes: { ok: boolean }[]) => outcomes.filter((o) => o.ok).length;

    it("gives a key to exactly one of 40 concurrent claims between two instances, and consume then refuses it", async () => {
      const key = memo();
      const outcomes = await Promise.all(Array.from({ length: 40 }, (_, i) => claim((i % 2) as 0 | 1, key)));
      expect(won(outcomes)).toBe(1);
      expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
    });

    it("tells a claim for the same request that the key is in flight and for how long, another request that it is used", async () => {
      const key = memo();
      expect((await claim(0, key)).ok).toBe(true);
      s.advance(400);
      expect(await claim(1, key)).toEqual({ ok: false, reason: "in-flight", retryAfterMs: 600 });
      expect(await claim(1, key, "GET /b")).toEqual({ ok: false, reason: "used" });
      const consumed = memo();
      expect(await s.guards[0].consume(consumed, s.now() + 60_000)).toBe(true);
      expect(await claim(1, consumed)).toEqual({ ok: false, reason: "used" });
    });

    it("lets exactly one claim for the same request take a passed lease over, between two instances", async () => {
      const key = memo();
      expect((await claim(0, key)).ok).toBe(true);
      s.advance(1_000);
      const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => claim((i % 2) as 0 | 1, key)));
      expect(won(outcomes)).toBe(1);
      // The takeover has its own lease.
      expect(await claim(0, key)).toEqual({ ok: false, reason: "in-flight", retryAfterMs: 1_000 });
    });

    it("never lets another request or a consume take a passed lease over", async () => {
      const key = memo();
      expect((await claim(0, key)).ok).toBe(true);
      s.advance(5_000);
      expect(await claim(1, key, "GET /b")).toEqual({ ok: false, reason: "used" });
      expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
      expect((await claim(1, key)).ok).toBe(true);
    });

    it("refuses a takeover once the key has had maxClaims claims", async () => {
      const key = memo();
      expect((await claim(0, key, "GET /a", 2)).ok).toBe(true);
      s.advance(1_000);
      expect((await claim(1, key, "GET /a", 2)).ok).toBe(true);
      s.advance(1_000);
      expect(await claim(0, key, "GET /a", 2)).toEqual({ ok: false, reason: "used" });
    });

    it("uses a settled key for good: no takeover after its lease, and its holder's token releases nothing", async () => {
      const key = memo();
      const first = await claim(0, key);
      if (!first.ok) throw new Error("claim lost");
      await s.guards[1].settle!(key, s.now() + 60_000);
      await s.guards[0].release(key, first.token);
      s.advance(5_000);
      expect(await claim(0, key)).toEqual({ ok: false, reason: "used" });
      expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
      // Settling a key nobody holds remembers it too.
      const absent = memo();
      await s.guards[0].settle!(absent, s.now() + 60_000);
      expect(await claim(1, absent)).toEqual({ ok: false, reason: "used" });
    });

    it("releases a claim by its own token only, for one later claim", async () => {
      const key = memo();
      const first = await claim(0, key);
      if (!first.ok) throw new Error("claim lost");
      s.advance(1_000);
      const second = await claim(1, key);
      if (!second.ok) throw new Error("takeover lost");
      // The first holder's late release, a token-less release and a wrong token leave the takeover.
      await s.guards[0].release(key, first.token);
      await s.guards[0].release(key);
      await s.guards[1].release(key, "not-the-token");
      expect(await claim(0, key)).toMatchObject({ ok: false, reason: "in-flight" });
      await s.guards[1].release(key, second.token);
      const again = await Promise.all([claim(0, key), claim(1, key), claim(0, key, "GET /b")]);
      expect(won(again)).toBe(1);
    });

    it("does not release a key used by consume when given a token", async () => {
      const key = memo();
      expect(await s.guards[0].consume(key, s.now() + 60_000)).toBe(true);
      await s.guards[1].release(key, "some-token");
      expect(await s.guards[1].consume(key, s.now() + 60_000)).toBe(false);
    });
  });

  it("treats a very long key as itself, not as a prefix", async () => {
    const long = "m".repeat(10_000);
    expect(await s.guards[0].consume(`${long}a`, s.now() + 60_000)).toBe(true);
    expect(await s.guards[0].consume(`${long}b`, s.now() + 60_000)).toBe(true);
    expect(await s.guards[1].consume(`${long}a`, s.now() + 60_000)).toBe(false);
  });
}

describe("memory replay guard", () => {
  describe("contract", () => {
    contractSuite(async () => {
      const clock = createFixedClock(T0);
      const guard = createMemoryReplayGuard({ clock });
      return { guards: [guard, guard], now: clock.now, advance: clock.advance };
    });
  });

  it("purges expired keys as the clock passes their expiry", async () => {
    const clock = createFixedClock(T0);
    const guard = createMemoryReplayGuard({ clock });
    for (let i = 0; i < 10; i++) await guard.consume(`k${i}`, T0 + 1_000 * (i + 1));
    expect(guard.size).toBe(10);
    clock.set(T0 + 3_000);
    expect(await guard.consume("late", T0 + 60_000)).toBe(true);
    // k0..k2 expired at 1 s, 2 s and 3 s; the rest and "late" remain.
    expect(guard.size).toBe(8);
    clock.set(T0 + 10_000);
    await guard.consume("later", T0 + 60_000);
    expect(guard.size).toBe(2);
  });

  it("forgets a key at its expiry, so it may be consumed again afterwards", async () => {
    const clock = createFixedClock(T0);
    const guard = createMemoryReplayGuard({ clock });
    expect(await guard.consume("k", T0 + 1_000)).toBe(true);
    clock.set(T0 + 999);
    expect(await guard.consume("k", T0 + 5_000)).toBe(false);
    clock.set(T0 + 1_000);
    expect(await guard.consume("k", T0 + 5_000)).toBe(true);
  });

  it("keeps a released and re-consumed key until its new expiry, not the old one", async () => {
    const clock = createFixedClock(T0);
    const guard = createMemoryReplayGuard({ clock });
    expect(await guard.consume("k", T0 + 1_000)).toBe(true);
    await guard.release("k");
    expect(guard.size).toBe(0);
    expect(await guard.consume("k", T0 + 5_000)).toBe(true);
    // The first consume's expiry passes: the key stays remembered under its new one.
    clock.set(T0 + 1_000);
    expect(await guard.consume("k", T0 + 5_000)).toBe(false);
    expect(guard.size).toBe(1);
    clock.set(T0 + 5_000);
    expect(await guard.consume("k", T0 + 9_000)).toBe(true);
  });

  it("refuses new keys with RateLimited when full, rather than forgetting unexpired ones", async () => {
    const clock = createFixedClock(T0);
    const guard = createMemoryReplayGuard({ clock, maxEntries: 3 });
    await guard.consume("a", T0 + 5_000);
    await guard.consume("b", T0 + 2_500);
    await guard.consume("c", T0 + 9_000);
    const error = await guard.consume("d", T0 + 9_000).catch((e: unknown) => e);
    expect(isTollgateError(error, "RateLimited")).toBe(true);
    expect((error as { retryAfter?: number }).retryAfter).toBe(3);
    expect(guard.size).toBe(3);
    expect(await guard.consume("a", T0 + 5_000)).toBe(false);
    clock.set(T0 + 2_500);
    expect(await guard.consume("d", T0 + 9_000)).toBe(true);
  });

  it("keeps its size bounded under a long stream of short-lived keys", async () => {
    const clock = createFixedClock(T0);
    const guard = createMemoryReplayGuard({ clock, maxEntries: 100 });
    for (let i = 0; i < 10_000; i++) {
      clock.advance(10);
      // Each key lives 500 ms, so about 50 are live at any moment.
      expect(await guard.consume(`k${i}`, clock.now() + 500)).toBe(true);
    }
    expect(guard.size).toBeLessThanOrEqual(51);
  });
});

describe("PostgreSQL-dialect replay guard on PGlite", () => {
  describe("contract, two guards on one store", () => {
    let shared: Store | undefined;
    afterAll(async () => {
      await shared?.close();
    });
    contractSuite(async () => {
      const clock = createFixedClock(T0);
      shared = await createStore({ dataDir: "memory://" });
      return {
        guards: [createPostgresReplayGuard(shared, { clock }), createPostgresReplayGuard(shared, { clock })],
        now: clock.now,
        advance: clock.advance,
      };
    });
  });

  let store: Store;
  beforeAll(async () => {
    store = await createStore({ dataDir: "memory://" });
  });
  afterAll(async () => {
    await store.close();
  });
  const count = async () =>
    (await store.query<{ n: string }>("SELECT count(*) AS n FROM consumed_memos"))[0]!.n;

  it("takes over an expired row that was not pruned yet, once", async () => {
    const clock = createFixedClock(T0);
    const guard = createPostgresReplayGuard(store, { clock, pruneIntervalMs: 3_600_000 });
    expect(await guard.consume("takeover", T0 + 1_000)).toBe(true);
    clock.set(T0 + 1_000);
    const again = await Promise.all(Array.from({ length: 10 }, () => guard.consume("takeover", T0 + 9_000)));
    expect(again.filter(Boolean)).toHaveLength(1);
  });

  it("prunes expired rows, lazily once per interval and on demand", async () => {
    await store.query("DELETE FROM consumed_memos");
    const clock = createFixedClock(T0);
    const guard = createPostgresReplayGuard(store, { clock, pruneIntervalMs: 10_000 });
    for (let i = 0; i < 6; i++) await guard.consume(`p${i}`, T0 + 5_000 + i);
    expect(await count()).toBe("6");
    clock.set(T0 + 5_003); // p0..p3 have expired
    expect(await guard.prune()).toBe(4);
    expect(await count()).toBe("2");

    clock.set(T0 + 20_000); // past the interval: the next consume prunes in the background
    expect(await guard.consume("fresh", T0 + 30_000)).toBe(true);
    await guard.close();
    expect(await count()).toBe("1");
  });
});

describe.runIf(databaseUrl)("PostgreSQL replay guard on PostgreSQL", () => {
  describe("contract, two stores on one database", () => {
    const stores: Store[] = [];
    afterAll(async () => {
      await stores[1]?.close();
      await stores[0]?.close();
    });
    contractSuite(async () => {
      const first = await createTestStore({ databaseUrl });
      stores.push(first);
      // A second pool on the same schema, as a second gate process would have.
      stores.push(await createStore({ databaseUrl, schema: first.schema, maxConnections: 4 }));
      const clock = createFixedClock(T0);
      return {
        guards: [
          createPostgresReplayGuard(stores[0]!, { clock }),
          createPostgresReplayGuard(stores[1]!, { clock }),
        ],
        now: clock.now,
        advance: clock.advance,
      };
    });
  });
});

describe.runIf(redisUrl)("Redis replay guard", () => {
  const prefix = `tollgate:test:${randomBytes(6).toString("hex")}:`;
  const opened: ReplayGuard[] = [];
  afterAll(async () => {
    for (const guard of opened) await guard.close?.();
    const admin = createClient({ url: redisUrl! });
    await admin.connect();
    for await (const keys of admin.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      if (keys.length > 0) await admin.del(keys);
    }
    await admin.close();
  });

  describe("contract, two clients on one server", () => {
    contractSuite(async () => {
      // The gates' clock, moved by the tests; it starts at Redis's time, which expires the keys.
      const clock = createFixedClock(systemClock.now());
      const a = await createRedisReplayGuard({ url: redisUrl!, prefix, clock });
      const b = await createRedisReplayGuard({ url: redisUrl!, prefix, clock });
      opened.push(a, b);
      return { guards: [a, b], now: clock.now, advance: clock.advance };
    });
  });

  it("sets the key to expire at the memo's expiry plus the skew tolerance", async () => {
    const client = createClient({ url: redisUrl! });
    await client.connect();
    try {
      const guard = await createRedisReplayGuard({ client, prefix, skewToleranceMs: 5_000 });
      const expiresAtMs = systemClock.now() + 120_000;
      expect(await guard.consume("ttl-check", expiresAtMs)).toBe(true);
      const keys: string[] = [];
      for await (const batch of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 }))
        keys.push(...batch);
      const expiries = await Promise.all(keys.map((key) => client.pExpireTime(key)));
      expect(expiries).toContain(expiresAtMs + 5_000);
      // The guard does not close a client it was given.
      await guard.close?.();
      expect(await client.ping()).toBe("PONG");
    } finally {
      await client.close();
    }
  });
});
