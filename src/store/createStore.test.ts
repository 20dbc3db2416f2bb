import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { isTollgateError } from "../protocol/errors.ts";
import { claimRows } from "./claimRows.ts";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "./columnSchemas.ts";
import { createStore } from "./createStore.ts";
import { createTestStore } from "./createTestStore.ts";
import { loadMigrations } from "./migrate.ts";
import { queryOneParsed, queryParsed } from "./queryParsed.ts";
import { isUniqueViolation, sqlErrorCode } from "./sqlErrorCode.ts";
import type { Store } from "./store.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const ItemSchema = z.object({ id: SafeIntColumnSchema, status: z.string(), owner: z.string().nullable() });

/** The behaviour every backend must share; `kind` names the backend under test. */
function storeSuite(open: () => Promise<Store>) {
  let store: Store;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store.close();
  });
  afterEach(async () => {
    await store.exec(
      "DROP TABLE IF EXISTS t_items; DROP TABLE IF EXISTS t_amounts; DROP TABLE IF EXISTS t_counter",
    );
  });

  it("records every migration exactly once", async () => {
    const expected = (await loadMigrations()).map((m) => m.version);
    const rows = await queryParsed(
      store,
      z.object({ version: z.number() }),
      "SELECT version FROM tollgate_migrations ORDER BY version",
    );
    expect(rows.map((r) => r.version)).toEqual(expected);
    expect(expected).toContain(1);
    expect(expected).toContain(2);
  });

  it("commits a transaction's writes and returns its value", async () => {
    await store.exec("CREATE TABLE t_counter (id int PRIMARY KEY, v int NOT NULL)");
    const value = await store.transaction(async (tx) => {
      await tx.query("INSERT INTO t_counter VALUES (1, 41)");
      await tx.query("UPDATE t_counter SET v = v + 1 WHERE id = 1");
      return "done";
    });
    expect(value).toBe("done");
    expect(await store.query("SELECT v FROM t_counter")).toEqual([{ v: 42 }]);
  });

  it("rolls back every write of a transaction that throws, and rethrows", async () => {
    await store.exec("CREATE TABLE t_counter (id int PRIMARY KEY, v int NOT NULL)");
    await store.query("INSERT INTO t_counter VALUES (1, 1)");
    const failure = new Error("stop");
    await expect(
      store.transaction(async (tx) => {
        await tx.query("UPDATE t_counter SET v = 100 WHERE id = 1");
        await tx.query("INSERT INTO t_counter VALUES (2, 2)");
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await store.query("SELECT id, v FROM t_counter ORDER BY id")).toEqual([{ id: 1, v: 1 }]);
  });

  it("rolls back a transaction whose statement fails, leaving the store usable", async () => {
    await store.exec("CREATE TABLE t_counter (id int PRIMARY KEY, v int NOT NULL)");
    const error = await store
      .transaction(async (tx) => {
        await tx.query("INSERT INTO t_counter VALUES (1, 1)");
        await tx.query("INSERT INTO t_counter VALUES (1, 2)");
      })
      .catch((e: unknown) => e);
    expect(isUniqueViolation(error)).toBe(true);
    expect(await store.query("SELECT count(*) AS n FROM t_counter")).toEqual([{ n: "0" }]);
  });

  it("keeps a plain query issued during an open transaction out of that transaction", async () => {
    await store.exec("CREATE TABLE t_counter (id int PRIMARY KEY, v int NOT NULL)");
    const inserted = deferred();
    const release = deferred();
    const tx = store.transaction(async (t) => {
      await t.query("INSERT INTO t_counter VALUES (1, 1)");
      inserted.resolve();
      await release.promise;
      throw new Error("roll back the transaction");
    });
    await inserted.promise;
    // Had this landed inside the transaction, the rollback would take row 2 away with row 1.
    const plain = store.query("INSERT INTO t_counter VALUES (2, 2)");
    release.resolve();
    await expect(tx).rejects.toThrow("roll back the transaction");
    await plain;
    expect(await store.query("SELECT id FROM t_counter ORDER BY id")).toEqual([{ id: 2 }]);
  });

  it("loses no update among 20 concurrent read-modify-write transactions", async () => {
    await store.exec("CREATE TABLE t_counter (id int PRIMARY KEY, v int NOT NULL)");
    await store.query("INSERT INTO t_counter VALUES (1, 0)");
    await Promise.all(
      Array.from({ length: 20 }, () =>
        store.transaction(async (tx) => {
          const [row] = await queryParsed(
            tx,
            z.object({ v: z.number() }),
            "SELECT v FROM t_counter WHERE id = 1 FOR UPDATE",
          );
          await new Promise((r) => setImmediate(r));
          await tx.query("UPDATE t_counter SET v = $1 WHERE id = 1", [row!.v + 1]);
        }),
      ),
    );
    expect(await store.query("SELECT v FROM t_counter")).toEqual([{ v: 20 }]);
  });

  it("round-trips bigint amounts from 0 to 2^256-1 through uint256, int8 and text columns", async () => {
    await store.exec("CREATE TABLE t_amounts (id int PRIMARY KEY, amount uint256, n bigint, s text)");
    const max = 2n ** 256n - 1n;
    const values = [0n, 1n, 500000n, 2n ** 53n + 1n, max];
    for (const [i, amount] of values.entries()) {
      await store.query("INSERT INTO t_amounts (id, amount, s) VALUES ($1, $2, $3)", [i, amount, amount]);
    }
    await store.query("UPDATE t_amounts SET n = $1 WHERE id = 0", [2n ** 63n - 1n]);
    const rows = await queryParsed(
      store,
      z.object({ amount: BigintColumnSchema, s: BigintColumnSchema }),
      "SELECT amount, s FROM t_amounts ORDER BY id",
    );
    expect(rows).toEqual(values.map((v) => ({ amount: v, s: v })));
    const row = await queryOneParsed(
      store,
      z.object({ n: BigintColumnSchema }),
      "SELECT n FROM t_amounts WHERE id = 0",
    );
    expect(row).toEqual({ n: 2n ** 63n - 1n });
    // Arithmetic happens in the database without loss, too.
    const sum = await queryOneParsed(
      store,
      z.object({ total: BigintColumnSchema }),
      "SELECT sum(amount) AS total FROM t_amounts WHERE amount < $1",
      [max],
    );
    expect(sum).toEqual({ total: 500001n + 2n ** 53n + 1n });
    // The uint256 domain of migration 0001 refuses what a uint256 cannot hold.
    for (const outside of [max + 1n, -1n]) {
      const error = await store
        .query("INSERT INTO t_amounts (id, amount) VALUES (9, $1)", [outside])
        .catch((e) => e);
      expect(sqlErrorCode(error)).toBe("23514");
    }
  });

  it("binds objects as JSON and reads jsonb, timestamptz and bytea back as values", async () => {
    const [row] = await store.query<{ j: unknown; t: Date; b: Uint8Array }>(
      "SELECT $1::jsonb AS j, $2::timestamptz AS t, $3::bytea AS b",
      [{ amount: 2n ** 70n, nested: { ok: true } }, new Date(1_763_800_000_000), new Uint8Array([0, 255, 7])],
    );
    expect(row!.j).toEqual({ amount: (2n ** 70n).toString(), nested: { ok: true } });
    expect(TimestampColumnSchema.parse(row!.t).getTime()).toBe(1_763_800_000_000);
    expect([...row!.b]).toEqual([0, 255, 7]);
  });

  it("stores and reads a payment row of migration 0001", async () => {
    const nonce = `0x${"ab".repeat(32)}`;
    const address = `0x${"12".repeat(20)}`;
    const insert = () =>
      store.query<{ id: string }>(
        `INSERT INTO payments (nonce, network, token, payer, pay_to, amount, memo, scheme,
           valid_after, valid_before, signature)
         VALUES ($1, 'eip155:31337', $2, $2, $2, $3, 'memo', 'exact', 0, $4, '0xsig') RETURNING id`,
        [nonce, address, 500000n, 2n ** 256n - 1n],
      );
    await insert();
    // The nonce (keccak256 of the memo) makes a memo payable once.
    expect(isUniqueViolation(await insert().catch((e: unknown) => e))).toBe(true);
    const payment = await queryOneParsed(
      store,
      z.object({ amount: BigintColumnSchema, valid_before: BigintColumnSchema, status: z.string() }),
      "SELECT amount, valid_before, status FROM payments WHERE nonce = $1",
      [nonce],
    );
    expect(payment).toEqual({ amount: 500000n, valid_before: 2n ** 256n - 1n, status: "pending" });
    await store.query("DELETE FROM payments");
  });

  it("claims disjoint rows with FOR UPDATE SKIP LOCKED while another claimer holds its rows", async () => {
    await store.exec("CREATE TABLE t_items (id serial PRIMARY KEY, status text NOT NULL, owner text)");
    await store.query("INSERT INTO t_items (status) SELECT 'pending' FROM generate_series(1, 10)");
    const aClaimed = deferred();
    const bDone = deferred();
    const claim = (tx: Parameters<Parameters<Store["transaction"]>[0]>[0], owner: string) =>
      queryParsed(
        tx,
        ItemSchema,
        `UPDATE t_items SET status = 'claimed', owner = $1 WHERE id IN (
           SELECT id FROM t_items WHERE status = 'pending' ORDER BY id LIMIT 4 FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [owner],
      );
    const a = store.transaction(async (tx) => {
      const rows = await claim(tx, "a");
      aClaimed.resolve();
      // On PostgreSQL, hold the row locks until B has claimed: B must skip them, not wait for them
      // (waiting would deadlock this test). PGlite runs one transaction at a time, so B starts after.
      if (store.kind === "postgres") await bDone.promise;
      return rows;
    });
    await aClaimed.promise;
    const b = store.transaction((tx) => claim(tx, "b")).finally(bDone.resolve);
    const [rowsA, rowsB] = await Promise.all([a, b]);
    const idsA = rowsA.map((r) => r.id);
    const idsB = rowsB.map((r) => r.id);
    expect(idsA).toHaveLength(4);
    expect(idsB).toHaveLength(4);
    expect(idsA.filter((id) => idsB.includes(id))).toEqual([]);
    const owners = await store.query(
      "SELECT owner, count(*) AS n FROM t_items GROUP BY owner ORDER BY owner",
    );
    expect(owners).toEqual([
      { owner: "a", n: "4" },
      { owner: "b", n: "4" },
      { owner: null, n: "2" },
    ]);
  });

  it("hands every row to exactly one of eight concurrent claimRows workers", async () => {
    await store.exec("CREATE TABLE t_items (id serial PRIMARY KEY, status text NOT NULL, owner text)");
    await store.query("INSERT INTO t_items (status) SELECT 'pending' FROM generate_series(1, 100)");
    const worker = async (owner: string) => {
      const mine: number[] = [];
      for (;;) {
        const rows = await claimRows(store, ItemSchema, {
          table: "t_items",
          where: "status = 'pending'",
          set: "status = 'claimed', owner = $1",
          params: [owner],
          limit: 3,
        });
        if (rows.length === 0) return mine;
        expect(rows.every((r) => r.owner === owner && r.status === "claimed")).toBe(true);
        mine.push(...rows.map((r) => r.id));
      }
    };
    const claimed = (await Promise.all(Array.from({ length: 8 }, (_, i) => worker(`w${i}`)))).flat();
    expect(claimed).toHaveLength(100);
    expect(new Set(claimed).size).toBe(100);
  });

  it("refuses store calls made inside its own transaction instead of deadlocking", async () => {
    const error = await store.transaction(() => store.query("SELECT 1")).catch((e: unknown) => e);
    expect(isTollgateError(error, "Internal")).toBe(true);
    expect(String(error)).toMatch(/tx handle/);
    expect(await store.query("SELECT 1 AS one")).toEqual([{ one: 1 }]);
  });

  it("refuses a transaction handle used after its transaction ended", async () => {
    const leaked = await store.transaction(async (tx) => tx);
    await expect(leaked.query("SELECT 1")).rejects.toThrow(/after its transaction ended/);
  });

  it("rejects a row that does not match its schema with a typed error", async () => {
    const error = await queryParsed(store, z.object({ n: z.string() }), "SELECT 1 AS n").catch(
      (e: unknown) => e,
    );
    expect(isTollgateError(error, "Internal")).toBe(true);
  });
}

describe("store on PGlite (memory)", () => {
  storeSuite(() => createStore({ dataDir: "memory://" }));
});

describe("store on PGlite in a schema", () => {
  storeSuite(() => createStore({ dataDir: "memory://", schema: "tenant_a" }));
});

describe.runIf(databaseUrl)("store on PostgreSQL", () => {
  storeSuite(() => createTestStore({ databaseUrl }));
});

describe("store on a persisted PGlite data directory", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "tollgate-store-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("keeps committed rows and applied migrations across close and reopen", async () => {
    const dataDir = join(dir, "nested", "pglite");
    const first = await createStore({ dataDir });
    await first.exec("CREATE TABLE kept (v numeric(78,0))");
    await first.query("INSERT INTO kept VALUES ($1)", [2n ** 255n]);
    await first.close();

    const second = await createStore({ dataDir });
    const rows = await queryParsed(second, z.object({ v: BigintColumnSchema }), "SELECT v FROM kept");
    expect(rows).toEqual([{ v: 2n ** 255n }]);
    const migrations = await second.query("SELECT version FROM tollgate_migrations");
    expect(migrations).toHaveLength((await loadMigrations()).length);
    await second.close();
  }, 120_000); // opens a disk-backed PGlite twice, migrating it: slow on a busy machine

  it("refuses a second open of a directory that is still open, and opens it once the first closes", async () => {
    const dataDir = join(dir, "held");
    const first = await createStore({ dataDir, migrate: false });
    try {
      await expect(createStore({ dataDir, migrate: false })).rejects.toMatchObject({
        code: "InvalidRequest",
        details: { reason: "store_in_use", dataDir, owner: process.pid },
      });
    } finally {
      await first.close();
    }
    expect(existsSync(`${dataDir}.lock`)).toBe(false);
    const second = await createStore({ dataDir, migrate: false });
    await second.close();
  }, 120_000);

  it("refuses a directory held by another live process, and takes over one whose process is gone", async () => {
    const dataDir = join(dir, "other");
    const holder = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"]);
    try {
      writeFileSync(`${dataDir}.lock`, `${holder.pid}\n`);
      await expect(createStore({ dataDir, migrate: false })).rejects.toMatchObject({
        details: { reason: "store_in_use", owner: holder.pid },
      });
    } finally {
      holder.kill("SIGKILL");
      await new Promise((resolve) => holder.once("exit", resolve));
    }
    // The holder is gone now: its lock is stale and is taken over.
    const store = await createStore({ dataDir, migrate: false });
    expect(readFileSync(`${dataDir}.lock`, "utf8").trim()).toBe(String(process.pid));
    await store.close();
    expect(existsSync(`${dataDir}.lock`)).toBe(false);
  }, 120_000);
});

describe.runIf(databaseUrl)("store schemas on one PostgreSQL database", () => {
  it("keeps each schema's tables invisible to a store opened on another schema", async () => {
    const suffix = randomBytes(4).toString("hex");
    const a = await createStore({ databaseUrl, schema: `iso_a_${suffix}`, maxConnections: 2 });
    const b = await createStore({ databaseUrl, schema: `iso_b_${suffix}`, maxConnections: 2 });
    try {
      await a.query(`INSERT INTO events (type, data) VALUES ('payment.settled', $1)`, [{ amount: "1" }]);
      expect(await a.query("SELECT type FROM events")).toEqual([{ type: "payment.settled" }]);
      expect(await b.query("SELECT type FROM events")).toEqual([]);
    } finally {
      await a.dropSchema();
      await b.dropSchema();
      await a.close();
      await b.close();
    }
    const left = await createStore({ databaseUrl, migrate: false, maxConnections: 1 });
    const schemas = await left.query("SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", [
      `iso_%_${suffix}`,
    ]);
    await left.close();
    expect(schemas).toEqual([]);
  });
});
