/**
 * The PostgreSQL store runs parameterised statements as named prepared statements (createPostgresStore.ts):
 * parsed once per connection, and still right when the tables they read change under them or when the
 * connection lost them. One connection per store, so that every statement meets the same session.
 * Needs DATABASE_URL.
 */
import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_LOST_STATEMENTS, MAX_PREPARED_TEXTS } from "./createPostgresStore.ts";
import { createStore } from "./createStore.ts";
import type { Store } from "./store.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;

describe.runIf(databaseUrl)("PostgreSQL store: prepared statements", () => {
  const opened: Store[] = [];
  afterEach(async () => {
    for (const store of opened.splice(0)) {
      await store.dropSchema().catch(() => undefined);
      await store.close();
    }
  });
  async function open(options: { preparedStatements?: boolean } = {}): Promise<Store> {
    const store = await createStore({
      databaseUrl,
      schema: `prep_${randomBytes(4).toString("hex")}`,
      migrate: false,
      maxConnections: 1,
      ...options,
    });
    opened.push(store);
    await store.exec("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)");
    await store.exec("INSERT INTO items VALUES (1, 'one'), (2, 'two')");
    return store;
  }
  const prepared = (store: Store) =>
    store.query<{ statement: string }>(
      "SELECT statement FROM pg_prepared_statements WHERE NOT from_sql ORDER BY prepare_time",
    );

  it("parses a parameterised text once per connection and runs it again by name", async () => {
    const store = await open();
    const sql = "SELECT name FROM items WHERE id = $1";
    expect(await store.query(sql, [1])).toEqual([{ name: "one" }]);
    expect(await store.query(sql, [2])).toEqual([{ name: "two" }]);
    await store.transaction(async (tx) => expect(await tx.query(sql, [1])).toEqual([{ name: "one" }]));
    // One statement kept for the text; the text without parameters above ran unnamed.
    expect(await prepared(store)).toEqual([{ statement: sql }]);
  });

  it("keeps nothing prepared when turned off", async () => {
    const store = await open({ preparedStatements: false });
    expect(await store.query("SELECT name FROM items WHERE id = $1", [1])).toEqual([{ name: "one" }]);
    expect(await prepared(store)).toEqual([]);
  });

  it("answers with the table's new shape after another session added a column", async () => {
    const store = await open();
    const other = await createStore({ databaseUrl, migrate: false, maxConnections: 1 });
    try {
      const sql = "SELECT * FROM items WHERE id = $1";
      expect(await store.query(sql, [1])).toEqual([{ id: 1, name: "one" }]);
      // As a migration run by another instance would: the kept plan's result type no longer fits.
      await other.exec(`ALTER TABLE ${store.schema}.items ADD COLUMN note text NOT NULL DEFAULT 'n'`);
      expect(await store.query(sql, [1])).toEqual([{ id: 1, name: "one", note: "n" }]);
      expect(await store.query(sql, [2])).toEqual([{ id: 2, name: "two", note: "n" }]);
    } finally {
      await other.close();
    }
  });

  it("fails a transaction that met a changed table, and runs the text afresh afterwards", async () => {
    const store = await open();
    const other = await createStore({ databaseUrl, migrate: false, maxConnections: 1 });
    try {
      const sql = "SELECT * FROM items WHERE id = $1";
      await store.query(sql, [1]);
      await other.exec(`ALTER TABLE ${store.schema}.items ADD COLUMN note text`);
      // Inside a transaction the refusal aborted it: nothing may run again there.
      await expect(store.transaction((tx) => tx.query(sql, [1]))).rejects.toMatchObject({ code: "0A000" });
      await store.transaction(async (tx) =>
        expect(await tx.query(sql, [1])).toEqual([{ id: 1, name: "one", note: null }]),
      );
    } finally {
      await other.close();
    }
  });

  it("prepares a statement again when its connection no longer holds it", async () => {
    const store = await open();
    const sql = "SELECT name FROM items WHERE id = $1";
    expect(await store.query(sql, [1])).toEqual([{ name: "one" }]);
    // What a pooler that moves sessions, or an operator's DEALLOCATE, leaves: the driver believes the
    // statement is there, the server does not have it.
    await store.exec("DEALLOCATE ALL");
    expect(await store.query(sql, [2])).toEqual([{ name: "two" }]);
    expect(await prepared(store)).toEqual([{ statement: sql }]);
  });

  it("stops preparing statements when the server keeps losing them, as behind a pooler in transaction mode", async () => {
    const store = await open();
    const sql = "SELECT name FROM items WHERE id = $1";
    // Each round: the statement is prepared, then the session forgets it, as a pooler that hands the
    // next statement to another server session would; every query still answers.
    for (let i = 0; i < MAX_LOST_STATEMENTS; i++) {
      await store.exec("DEALLOCATE ALL");
      expect(await store.query(sql, [1])).toEqual([{ name: "one" }]);
      expect(await store.query(sql, [1])).toEqual([{ name: "one" }]);
    }
    await store.exec("DEALLOCATE ALL");
    expect(await store.query(sql, [2])).toEqual([{ name: "two" }]);
    expect(await store.query("SELECT id FROM items WHERE name = $1", ["one"])).toEqual([{ id: 1 }]);
    expect(await prepared(store)).toEqual([]);
  });

  it("keeps at most MAX_PREPARED_TEXTS texts prepared and runs the rest unnamed", async () => {
    const store = await open();
    for (let i = 0; i < MAX_PREPARED_TEXTS + 5; i++) {
      expect(await store.query(`SELECT $1::int + ${i} AS n`, [1])).toEqual([{ n: 1 + i }]);
    }
    const rows = await store.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM pg_prepared_statements WHERE NOT from_sql",
    );
    expect(rows).toEqual([{ n: String(MAX_PREPARED_TEXTS) }]);
    // A text past the bound still answers, every time.
    expect(await store.query(`SELECT $1::int + ${MAX_PREPARED_TEXTS + 4} AS n`, [2])).toEqual([
      { n: MAX_PREPARED_TEXTS + 6 },
    ]);
  });
});
