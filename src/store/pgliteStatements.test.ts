import { PGlite } from "@electric-sql/pglite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPgliteStore } from "./createPgliteStore.ts";
import { PgliteStatements } from "./pgliteStatements.ts";
import { sqlErrorCode } from "./sqlErrorCode.ts";
import type { Store } from "./store.ts";

const TABLE = `CREATE TABLE t_values (
  id bigserial PRIMARY KEY, n int, big int8, amount numeric, ok boolean, at timestamptz,
  doc jsonb, raw bytea, tags text[], note text)`;

describe("PGlite prepared statements", () => {
  let store: Store;
  beforeAll(async () => {
    store = await createPgliteStore({ dataDir: "memory://" });
  });
  afterAll(async () => {
    await store.close();
  });

  it("returns rows exactly as PGlite's own query does, for every type the store maps", async () => {
    const plain = await PGlite.create({
      parsers: { 20: (value: string) => value, 1700: (value: string) => value },
    });
    try {
      await store.exec(TABLE);
      await plain.exec(TABLE);
      const insert =
        "INSERT INTO t_values (n, big, amount, ok, at, doc, raw, tags, note) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *";
      const rows: unknown[][] = [
        [
          7,
          "9007199254740993",
          "0.000001",
          true,
          new Date("2026-11-29T05:00:00.123Z"),
          '{"a":[1,"x"]}',
          new Uint8Array([0, 255, 16]),
          ["a", 'b"c', "d,e"],
          "é",
        ],
        [null, null, null, null, null, null, null, null, null],
        [-1, "0", "123456789012345678901234567890", false, new Date(0), "[]", new Uint8Array(), [], ""],
      ];
      for (const params of rows) {
        const prepared = await store.query(insert, params as never[]);
        const reference = (await plain.query(insert, params)).rows;
        expect(prepared).toEqual(reference);
      }
      const select =
        "SELECT n, big, amount, ok, at, doc, raw, tags, note, n + 1 AS next FROM t_values ORDER BY id";
      // Twice: the first run prepares, the second runs the prepared statement.
      for (let run = 0; run < 2; run++) {
        expect(await store.query(select)).toEqual((await plain.query(select)).rows);
      }
      expect(await store.query("UPDATE t_values SET note = $1 WHERE n = $2", ["y", 7])).toEqual([]);
    } finally {
      await store.exec("DROP TABLE t_values");
      await plain.close();
    }
  });

  it("plans every run for its parameters", async () => {
    expect(await store.query("SHOW plan_cache_mode")).toEqual([{ plan_cache_mode: "force_custom_plan" }]);
  });

  it("forgets its statements when a script changes the schema", async () => {
    await store.exec("CREATE TABLE t_shape (id int PRIMARY KEY)");
    await store.query("INSERT INTO t_shape (id) VALUES ($1)", [1]);
    expect(await store.query("SELECT * FROM t_shape")).toEqual([{ id: 1 }]);
    // A prepared `SELECT *` kept across this would fail: its result type changed.
    await store.exec("ALTER TABLE t_shape ADD COLUMN label text DEFAULT 'x'");
    expect(await store.query("SELECT * FROM t_shape")).toEqual([{ id: 1, label: "x" }]);
    await store.transaction(async (tx) => {
      await tx.exec("ALTER TABLE t_shape DROP COLUMN label");
      expect(await tx.query("SELECT * FROM t_shape")).toEqual([{ id: 1 }]);
    });
    await store.exec("DROP TABLE t_shape");
  });

  it("reports a statement's error with its code and keeps the connection usable", async () => {
    await store.exec("CREATE TABLE t_unique (k text PRIMARY KEY)");
    const insert = "INSERT INTO t_unique (k) VALUES ($1)";
    await store.query(insert, ["a"]);
    const duplicate = await store.query(insert, ["a"]).catch((error: unknown) => error);
    expect(sqlErrorCode(duplicate)).toBe("23505");
    expect((duplicate as { query?: string }).query).toBe(insert);
    // A text that does not parse is not kept: the same text fails again the same way.
    for (let run = 0; run < 2; run++) {
      const error = await store.query("SELEC k FROM t_unique").catch((e: unknown) => e);
      expect(sqlErrorCode(error)).toBe("42601");
    }
    // A failed statement inside a transaction rolls it back whole.
    const failed = await store
      .transaction(async (tx) => {
        await tx.query(insert, ["b"]);
        await tx.query(insert, ["a"]);
      })
      .catch((error: unknown) => error);
    expect(sqlErrorCode(failed)).toBe("23505");
    expect(await store.query("SELECT k FROM t_unique ORDER BY k")).toEqual([{ k: "a" }]);
    await store.exec("DROP TABLE t_unique");
  });

  it("keeps at most its limit of statements prepared, closing the oldest", async () => {
    const db = await PGlite.create();
    try {
      const statements = new PgliteStatements(db, 2);
      const texts = ["SELECT $1::int + 1 AS v", "SELECT $1::int + 2 AS v", "SELECT $1::int + 3 AS v"];
      const run = (sql: string) =>
        db._runExclusiveQuery(() => statements.run<{ v: number }>(sql, [1], false));
      for (let round = 0; round < 2; round++) {
        for (const [i, sql] of texts.entries()) expect(await run(sql)).toEqual([{ v: 2 + i }]);
      }
      expect(statements.size).toBe(2);
      // The closes of evicted statements went out with later prepares: the backend holds no more
      // than the limit (plus none leaked).
      const held = await db.query<{ count: number }>(
        "SELECT count(*)::int AS count FROM pg_prepared_statements",
      );
      expect(held.rows[0]?.count).toBeLessThanOrEqual(2);
    } finally {
      await db.close();
    }
  });

  it("runs concurrent statements one at a time, and none inside another caller's transaction", async () => {
    await store.exec("CREATE TABLE t_seen (k int PRIMARY KEY)");
    let release!: () => void;
    const hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    const transaction = store.transaction(async (tx) => {
      await tx.query("INSERT INTO t_seen (k) VALUES ($1)", [1]);
      await hold;
      throw new Error("roll back");
    });
    // Outside the transaction: must wait for it, then see its rollback.
    const outside = store.query<{ k: number }>("SELECT k FROM t_seen");
    const inserts = Promise.all([2, 3, 4].map((k) => store.query("INSERT INTO t_seen (k) VALUES ($1)", [k])));
    release();
    await expect(transaction).rejects.toThrow("roll back");
    expect(await outside).toEqual([]);
    await inserts;
    expect(await store.query("SELECT k FROM t_seen ORDER BY k")).toEqual([{ k: 2 }, { k: 3 }, { k: 4 }]);
    await store.exec("DROP TABLE t_seen");
  });
});
