import { createHash, randomBytes } from "node:crypto";
import { readFile, rename, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import { createPgliteStore } from "./createPgliteStore.ts";
import { createStore } from "./createStore.ts";
import { loadMigrations, migrate } from "./migrate.ts";
import type { Store } from "./store.ts";

let template: Promise<Blob> | undefined;

/**
 * A migrated in-memory PGlite database as a tarball, to start test stores from. PGlite's initdb costs
 * several times what loading a data directory does, and suites open hundreds of stores: the first test
 * process that needs it builds it and leaves it in the temporary directory, named by a hash of the
 * migrations and the installed PGlite, so a changed migration builds a new one. Written under a unique
 * name and renamed, so a concurrent builder never reads half a file.
 */
function migratedTemplate(): Promise<Blob> {
  template ??= (async () => {
    const migrations = await loadMigrations();
    const pgliteMain = createRequire(import.meta.url).resolve("@electric-sql/pglite");
    const pgliteVersion = (await stat(pgliteMain)).mtimeMs + pgliteMain;
    const hash = createHash("sha256")
      .update(JSON.stringify({ pgliteVersion, migrations }))
      .digest("hex")
      .slice(0, 16);
    const file = join(tmpdir(), `tollgate-test-pglite-${hash}.tar`);
    try {
      return new Blob([await readFile(file)]);
    } catch {}
    const store = await createPgliteStore({ dataDir: "memory://" });
    try {
      await migrate(store, { migrations });
      const dump = await store.dumpDataDir();
      const partial = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
      await writeFile(partial, new Uint8Array(await dump.arrayBuffer()));
      await rename(partial, file);
      return dump;
    } finally {
      await store.close();
    }
  })();
  template.catch(() => (template = undefined));
  return template;
}

/**
 * A throwaway migrated store for a test: in a fresh schema of the PostgreSQL at `databaseUrl` when one
 * is given (so test files sharing one database do not see each other's rows), otherwise an in-memory
 * PGlite. `close()` drops the schema first. The caller reads the environment, e.g.
 * `createTestStore({ databaseUrl: process.env.DATABASE_URL })`.
 */
export async function createTestStore(
  options: {
    databaseUrl?: string | undefined;
    logger?: Logger | undefined;
    /** Apply the migrations (default true); `false` for tests of the migrations themselves. */
    migrate?: boolean | undefined;
  } = {},
): Promise<Store> {
  if (options.databaseUrl === undefined || options.databaseUrl === "") {
    if (options.migrate === false)
      return createStore({ dataDir: "memory://", logger: options.logger, migrate: false });
    const store = await createPgliteStore({
      dataDir: "memory://",
      loadDataDir: await migratedTemplate(),
      logger: options.logger,
    });
    try {
      // Nothing left to apply; still checks the template against the migrations, as a fresh store would.
      await migrate(store, { logger: options.logger });
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }
  const store = await createStore({
    databaseUrl: options.databaseUrl,
    schema: `test_${randomBytes(6).toString("hex")}`,
    maxConnections: 4,
    logger: options.logger,
    migrate: options.migrate,
  });
  return {
    ...store,
    async close() {
      try {
        await store.dropSchema();
      } finally {
        await store.close();
      }
    },
  };
}
