import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isTollgateError } from "../protocol/errors.ts";
import { capturingLogger } from "./capturingLogger.ts";
import { createStore } from "./createStore.ts";
import { loadMigrations, type Migration, migrate } from "./migrate.ts";
import type { Store } from "./store.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;

function migration(version: number, name: string, sql: string): Migration {
  return { version, name, sql, checksum: `${version}:${sql.length}:${sql}` };
}

const three = [
  migration(3, "c", "ALTER TABLE m_items ADD COLUMN note text"),
  migration(1, "a", "CREATE TABLE m_items (id int PRIMARY KEY)"),
  migration(2, "b", "ALTER TABLE m_items ADD COLUMN amount numeric(78,0); INSERT INTO m_items VALUES (1, 5)"),
];

describe("loadMigrations", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "tollgate-migrations-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("reads Tollgate's migration files in ascending version order with distinct versions", async () => {
    const migrations = await loadMigrations();
    const versions = migrations.map((m) => m.version);
    expect(versions.slice(0, 2)).toEqual([1, 2]);
    expect([...versions].sort((a, b) => a - b)).toEqual(versions);
    expect(new Set(versions).size).toBe(versions.length);
    expect(migrations[0]).toMatchObject({ name: "payments" });
    expect(migrations[0]!.checksum).toMatch(/^[0-9a-f]{64}$/);
  });

  it("refuses a .sql file not named NNNN_name.sql", async () => {
    const sub = await mkdtemp(join(dir, "n-"));
    await writeFile(join(sub, "0001_ok.sql"), "SELECT 1");
    await writeFile(join(sub, "2_missing_padding.sql"), "SELECT 1");
    await writeFile(join(sub, "README.md"), "not a migration");
    await expect(loadMigrations(sub)).rejects.toThrow(/NNNN_name\.sql: 2_missing_padding\.sql/);
  });

  it("refuses two files with the same version", async () => {
    const sub = await mkdtemp(join(dir, "d-"));
    await writeFile(join(sub, "0001_first.sql"), "SELECT 1");
    await writeFile(join(sub, "0002_one.sql"), "SELECT 1");
    await writeFile(join(sub, "0002_other.sql"), "SELECT 1");
    const error = await loadMigrations(sub).catch((e: unknown) => e);
    expect(isTollgateError(error, "Internal")).toBe(true);
    expect(String(error)).toMatch(/share version 0002/);
  });
});

describe("migrate on PGlite", () => {
  let store: Store;
  beforeAll(async () => {
    store = await createStore({ dataDir: "memory://", migrate: false });
  });
  afterAll(async () => {
    await store.close();
  });

  it("applies pending migrations in version order, then nothing on a second run", async () => {
    const { logger, lines } = capturingLogger();
    expect(await migrate(store, { migrations: three, logger })).toEqual([1, 2, 3]);
    expect(await store.query("SELECT id, amount, note FROM m_items")).toEqual([
      { id: 1, amount: "5", note: null },
    ]);
    expect(lines().filter((l) => l.msg === "applied migration")).toHaveLength(3);
    expect(await migrate(store, { migrations: three })).toEqual([]);
    const recorded = await store.query("SELECT version, name FROM tollgate_migrations ORDER BY version");
    expect(recorded).toEqual([
      { version: 1, name: "a" },
      { version: 2, name: "b" },
      { version: 3, name: "c" },
    ]);
  });

  it("rolls back a failing migration alone, keeping earlier ones, and applies it once fixed", async () => {
    const broken = [...three, migration(4, "d", "ALTER TABLE m_items ADD COLUMN d int; SELECT 1/0")];
    await expect(migrate(store, { migrations: broken })).rejects.toThrow(/division by zero/);
    const columns = await store.query(
      "SELECT column_name FROM information_schema.columns WHERE table_name = 'm_items' AND column_name = 'd'",
    );
    expect(columns).toEqual([]);
    const fixed = [...three, migration(4, "d", "ALTER TABLE m_items ADD COLUMN d int")];
    expect(await migrate(store, { migrations: fixed })).toEqual([4]);
  });

  it("applies a lower version added after higher ones were applied", async () => {
    const other = await createStore({ dataDir: "memory://", migrate: false });
    try {
      const [one, two, three_] = [...three].sort((x, y) => x.version - y.version) as [
        Migration,
        Migration,
        Migration,
      ];
      const skipTwo = { ...three_, sql: "CREATE TABLE m_other (id int)" };
      expect(await migrate(other, { migrations: [one, skipTwo] })).toEqual([1, 3]);
      expect(await migrate(other, { migrations: [one, two, skipTwo] })).toEqual([2]);
    } finally {
      await other.close();
    }
  }, 120_000); // starts a PGlite instance of its own: slow on a busy machine

  it("warns when the file of an applied migration has changed", async () => {
    const { logger, lines } = capturingLogger();
    const edited = three.map((m) => (m.version === 2 ? { ...m, checksum: "edited" } : m));
    expect(await migrate(store, { migrations: edited, logger })).toEqual([]);
    expect(lines()).toContainEqual(
      expect.objectContaining({ level: 40, version: 2, msg: "applied migration file has changed" }),
    );
  });
});

describe.runIf(databaseUrl)("migrate on PostgreSQL", () => {
  const schemas: string[] = [];
  const freshSchema = () => {
    const schema = `mig_${randomBytes(6).toString("hex")}`;
    schemas.push(schema);
    return schema;
  };
  afterAll(async () => {
    const admin = await createStore({ databaseUrl, migrate: false, maxConnections: 1 });
    for (const schema of schemas) await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.close();
  });

  it("applies each migration exactly once when two processes start at the same moment", async () => {
    const schema = freshSchema();
    const a = await createStore({ databaseUrl, schema, migrate: false, maxConnections: 2 });
    const b = await createStore({ databaseUrl, schema, migrate: false, maxConnections: 2 });
    try {
      const all = await loadMigrations();
      const [byA, byB] = await Promise.all([migrate(a), migrate(b)]);
      expect([...byA, ...byB].sort((x, y) => x - y)).toEqual(all.map((m) => m.version));
      const recorded = await a.query("SELECT version FROM tollgate_migrations ORDER BY version");
      expect(recorded).toEqual(all.map((m) => ({ version: m.version })));
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("opens four stores concurrently on a fresh schema without errors", async () => {
    const schema = freshSchema();
    const stores = await Promise.all(
      Array.from({ length: 4 }, () => createStore({ databaseUrl, schema, maxConnections: 1 })),
    );
    try {
      const recorded = await stores[0]!.query<{ n: string }>("SELECT count(*) AS n FROM tollgate_migrations");
      expect(Number(recorded[0]!.n)).toBe((await loadMigrations()).length);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("finds nothing to apply when a store is started a second time", async () => {
    const schema = freshSchema();
    const first = await createStore({ databaseUrl, schema, maxConnections: 1 });
    await first.close();
    const second = await createStore({ databaseUrl, schema, migrate: false, maxConnections: 1 });
    try {
      expect(await migrate(second)).toEqual([]);
    } finally {
      await second.close();
    }
  });
});
