import { PGlite, type Transaction } from "@electric-sql/pglite";
import { assertSchemaName } from "./assertSchemaName.ts";
import { type LockDataDirOptions, lockDataDir } from "./lockDataDir.ts";
import { ensurePrivateDir, tightenTree } from "./privateFiles.ts";
import type { Queryable, SqlParam, Store } from "./store.ts";
import { noSchemaError, transactionEndedError } from "./storeErrors.ts";
import { toSqlParams } from "./toSqlParams.ts";
import { createTransactionScope } from "./transactionScope.ts";

const INT8_OID = 20;
const NUMERIC_OID = 1700;

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
}): Promise<Store> {
  const schema = options.schema === undefined ? undefined : assertSchemaName(options.schema);
  const inMemory = options.dataDir.startsWith("memory://");
  let unlock = () => {};
  if (!inMemory) {
    ensurePrivateDir(options.dataDir);
    unlock = await lockDataDir(options.dataDir, options.lock);
  }
  let db: PGlite;
  try {
    db = await PGlite.create({
      ...(inMemory ? {} : { dataDir: options.dataDir }),
      // Exact decimal strings for numeric and int8, as the pg driver returns them (see store.ts).
      parsers: { [INT8_OID]: (value: string) => value, [NUMERIC_OID]: (value: string) => value },
    });
    if (schema !== undefined) {
      await db.exec(`CREATE SCHEMA IF NOT EXISTS ${schema}; SET search_path TO ${schema}`);
    }
    // Files of earlier runs and the ones initdb just wrote.
    if (!inMemory) tightenTree(options.dataDir);
  } catch (error) {
    unlock();
    throw error;
  }
  const scope = createTransactionScope();

  const handle = (target: Pick<Transaction, "query" | "exec">, isOpen: () => boolean): Queryable => ({
    async query<Row>(sql: string, params: readonly SqlParam[] = []) {
      if (!isOpen()) throw transactionEndedError();
      const result = await target.query<Row>(sql, toSqlParams(params));
      return result.rows;
    },
    async exec(sql: string) {
      if (!isOpen()) throw transactionEndedError();
      await target.exec(sql);
    },
  });
  const direct = handle(db, () => true);

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
      return db.transaction((tx) => {
        let open = true;
        return scope.run(() => fn(handle(tx, () => open))).finally(() => (open = false));
      });
    },
    async dropSchema() {
      scope.assertOutside("dropSchema");
      if (schema === undefined) throw noSchemaError();
      await db.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE; SET search_path TO public`);
    },
    async close() {
      try {
        if (!db.closed) await db.close();
        // Files PGlite created while open (WAL segments, new relations) are 0666 until now.
        if (!inMemory) tightenTree(options.dataDir);
      } finally {
        unlock();
      }
    },
  };
}
