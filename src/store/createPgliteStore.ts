import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { PGlite, type Transaction } from "@electric-sql/pglite";
import type { Logger } from "pino";
import { assertSchemaName } from "./assertSchemaName.ts";
import { type LockDataDirOptions, lockDataDir } from "./lockDataDir.ts";
import { notificationChannel } from "./notificationChannel.ts";
import {
  type MaintenancePass,
  type PgliteMaintenanceOptions,
  startPgliteMaintenance,
} from "./pgliteMaintenance.ts";
import { PgliteStatements } from "./pgliteStatements.ts";
import { ensurePrivateDir, tightenTree } from "./privateFiles.ts";
import type { Queryable, SqlParam, Store } from "./store.ts";
import { noSchemaError, transactionEndedError } from "./storeErrors.ts";
import { toSqlParams } from "./toSqlParams.ts";
import { createTransactionScope } from "./transactionScope.ts";

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/**
 * PGlite's start parameters:
 * - a smaller buffer pool: 16 MB of shared buffers instead of PostgreSQL's 128 MB, which PGlite
 *   allocates inside its WebAssembly memory (resident for the process's life). A Tollgate store's
 *   working set is small, and its pages stay in the OS page cache or PGlite's in-memory file system
 *   anyway: resident memory drops by ~120 MB (docs/facilitator.md, "At rest");
 * - every prepared statement planned for its parameters (pgliteStatements.ts), as PostgreSQL plans
 *   the pg driver's unnamed statements: a generic plan, which PostgreSQL would switch to after five
 *   runs, cannot see that a queue's rows are nearly all in one state and scans a growing table
 *   (pgliteMaintenance.test.ts shows one, once the maintenance pass has given the planner statistics).
 */
const startParams = [
  ...PGlite.defaultStartParams,
  "-c",
  "shared_buffers=16MB",
  "-c",
  "plan_cache_mode=force_custom_plan",
];

/**
 * Creates a fresh on-disk database in a short-lived child process. PGlite runs initdb as a WebAssembly
 * module of its own whose memory (~300–500 MB) the process keeps resident after it is done; in a child
 * that memory goes away with it, and this process only opens an existing directory.
 */
function initialiseInChild(dataDir: string): Promise<void> {
  const pglite = pathToFileURL(createRequire(import.meta.url).resolve("@electric-sql/pglite")).href;
  const script =
    `const { PGlite } = await import(${JSON.stringify(pglite)});` +
    `const db = await PGlite.create({ dataDir: process.argv[1] }); await db.close();`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script, dataDir], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`cannot create the database in ${dataDir}: ${stderr.slice(-500)}`)),
    );
  });
}

/**
 * An embedded PGlite database. PGlite is one backend on one connection: it runs one statement at a
 * time and queues a plain query behind an open transaction, so transactions never interleave.
 * An on-disk `dataDir` is opened once at a time: it is held under a lock file (`lockDataDir`) until
 * `close()`, and a second opener waits up to `lock.waitMs` and then gets `store_in_use`.
 *
 * The directory is its owner's only (privateFiles.ts): created or tightened to 0700 before PGlite
 * touches it, and its files set to 0600 after PGlite opens it and again after it closes (PGlite gives
 * every file it creates mode 0666; inside a 0700 directory those are out of other users' reach).
 */
export async function createPgliteStore(options: {
  dataDir: string;
  schema?: string | undefined;
  lock?: LockDataDirOptions | undefined;
  /** An in-memory database's starting contents, a `dumpDataDir()` tarball (test stores, createTestStore.ts). */
  loadDataDir?: Blob | undefined;
  /** When to vacuum and analyse (pgliteMaintenance.ts); `false` never does on its own. */
  maintenance?: PgliteMaintenanceOptions | false | undefined;
  logger?: Logger | undefined;
}): Promise<
  Store & {
    dumpDataDir(): Promise<Blob>;
    /** Vacuums and analyses the tables past PostgreSQL's autovacuum thresholds, now. */
    maintain(): Promise<MaintenancePass>;
  }
> {
  const schema = options.schema === undefined ? undefined : assertSchemaName(options.schema);
  const inMemory = options.dataDir.startsWith("memory://");
  const { db, unlock } = await openDatabase(options, schema, inMemory);
  const scope = createTransactionScope();

  // Parameterised statements run prepared (pgliteStatements.ts) under PGlite's own locks: one
  // statement at a time, and outside a transaction only while none is open.
  const statements = new PgliteStatements(db);
  // Statements run through the store, for the maintenance pass to tell a quiet store from a busy one.
  const activity = { count: 0 };
  const maintenance = startPgliteMaintenance({
    db,
    activity: () => activity.count,
    settings: options.maintenance,
    logger: options.logger,
  });
  const direct = directQueryable(db, statements, activity);

  return {
    kind: "pglite",
    schema,
    query(sql, params) {
      scope.assertOutside("query");
      return direct.query(sql, params);
    },
    exec(sql) {
      scope.assertOutside("exec");
      return direct.exec(sql);
    },
    transaction(fn) {
      scope.assertOutside("transaction");
      activity.count++;
      return db.transaction((tx) => {
        let open = true;
        return scope
          .run(() => fn(transactionQueryable(db, statements, tx, () => open)))
          .finally(() => (open = false));
      });
    },
    async listen(name, fn) {
      return db.listen(notificationChannel(schema, name), fn);
    },
    dumpDataDir() {
      scope.assertOutside("dumpDataDir");
      return db.dumpDataDir("none");
    },
    async dropSchema() {
      scope.assertOutside("dropSchema");
      if (schema === undefined) throw noSchemaError();
      await db.exec(
        `${statements.forget()}DROP SCHEMA IF EXISTS ${schema} CASCADE; SET search_path TO public`,
      );
    },
    maintain() {
      scope.assertOutside("maintain");
      return maintenance.runNow();
    },
    async close() {
      try {
        await maintenance.stop();
        if (!db.closed) await db.close();
        // Files PGlite created while open (WAL segments, new relations) are 0666 until now.
        if (!inMemory) tightenTree(options.dataDir);
      } finally {
        unlock();
      }
    },
  };
}

type PgliteStoreOptions = Parameters<typeof createPgliteStore>[0];

/**
 * The database, opened: an on-disk directory made private, locked, created in a child when new and its
 * files tightened; the schema created and searched. The lock is released if any of it fails.
 */
async function openDatabase(
  options: PgliteStoreOptions,
  schema: string | undefined,
  inMemory: boolean,
): Promise<{ db: PGlite; unlock: () => void }> {
  let unlock = () => {};
  if (!inMemory) {
    ensurePrivateDir(options.dataDir);
    unlock = await lockDataDir(options.dataDir, options.lock);
  }
  try {
    if (!inMemory && !existsSync(join(options.dataDir, "PG_VERSION")))
      await initialiseInChild(options.dataDir);
    const db = await PGlite.create({
      ...(inMemory ? {} : { dataDir: options.dataDir }),
      ...(inMemory && options.loadDataDir !== undefined ? { loadDataDir: options.loadDataDir } : {}),
      startParams,
      // Exact decimal strings for numeric and int8, as the pg driver returns them (see store.ts).
      parsers: { [INT8_OID]: (value: string) => value, [NUMERIC_OID]: (value: string) => value },
    });
    if (schema !== undefined) {
      await db.exec(`CREATE SCHEMA IF NOT EXISTS ${schema}; SET search_path TO ${schema}`);
    }
    // Files of earlier runs and the ones initdb just wrote.
    if (!inMemory) tightenTree(options.dataDir);
    return { db, unlock };
  } catch (error) {
    unlock();
    throw error;
  }
}

/** Statements outside a transaction: each waits for any open transaction, and counts as activity. */
function directQueryable(db: PGlite, statements: PgliteStatements, activity: { count: number }): Queryable {
  return {
    query<Row>(sql: string, params: readonly SqlParam[] = []) {
      activity.count++;
      const values = toSqlParams(params);
      return db._runExclusiveTransaction(() =>
        db._runExclusiveQuery(() => statements.run<Row>(sql, values, false)),
      );
    },
    async exec(sql: string) {
      activity.count++;
      await db.exec(statements.forget() + sql);
    },
  };
}

/** Statements inside a transaction, refused once it has ended. */
function transactionQueryable(
  db: PGlite,
  statements: PgliteStatements,
  tx: Transaction,
  isOpen: () => boolean,
): Queryable {
  return {
    async query<Row>(sql: string, params: readonly SqlParam[] = []) {
      if (!isOpen()) throw transactionEndedError();
      const values = toSqlParams(params);
      return db._runExclusiveQuery(() => statements.run<Row>(sql, values, true));
    },
    async exec(sql: string) {
      if (!isOpen()) throw transactionEndedError();
      await tx.exec(statements.forget() + sql);
    },
  };
}
