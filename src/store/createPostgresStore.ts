import pg from "pg";
import type { Logger } from "pino";
import { assertSchemaName } from "./assertSchemaName.ts";
import type { Queryable, SqlParam, Store } from "./store.ts";
import { noSchemaError, transactionEndedError } from "./storeErrors.ts";
import { toSqlParams } from "./toSqlParams.ts";
import { createTransactionScope } from "./transactionScope.ts";

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/**
 * A PostgreSQL server reached through a `pg` pool. Each transaction holds one pooled connection from
 * BEGIN to COMMIT/ROLLBACK; plain queries take any free connection. With a `schema`, every pooled
 * connection starts with `search_path` set to it (a startup parameter, so no query can run before it).
 */
export async function createPostgresStore(options: {
  databaseUrl: string;
  schema?: string | undefined;
  maxConnections?: number | undefined;
  logger?: Logger | undefined;
}): Promise<Store> {
  const schema = options.schema === undefined ? undefined : assertSchemaName(options.schema);
  const pool = new pg.Pool({
    connectionString: options.databaseUrl,
    max: options.maxConnections ?? 10,
    ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
    // Per-pool parsers, independent of pg's global type registry: exact strings for numeric and int8.
    types: {
      getTypeParser: ((oid: number, format?: "text" | "binary") =>
        oid === INT8_OID || oid === NUMERIC_OID
          ? (value: string) => value
          : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
    },
  });
  // An idle connection dropped by the server emits 'error' on the pool; unhandled it would crash the
  // process. The pool replaces the connection on next use.
  pool.on("error", (error) => options.logger?.warn({ err: error }, "idle PostgreSQL connection failed"));
  // Fail at start, not on the first request, when the server is unreachable.
  await pool.query("SELECT 1");
  if (schema !== undefined) {
    // Concurrent `CREATE SCHEMA IF NOT EXISTS` can still collide on the catalog; the loser's schema exists.
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch(async (error: unknown) => {
      const exists = await pool.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
      if (exists.rowCount === 0) throw error;
    });
  }
  const scope = createTransactionScope();
  let closed = false;

  const handle = (client: pg.Pool | pg.PoolClient, isOpen: () => boolean): Queryable => ({
    async query<Row>(sql: string, params: readonly SqlParam[] = []) {
      if (!isOpen()) throw transactionEndedError();
      const result = await client.query(sql, toSqlParams(params));
      return result.rows as Row[];
    },
    async exec(sql: string) {
      if (!isOpen()) throw transactionEndedError();
      // Without parameters pg uses the simple-query protocol, which accepts several statements.
      await client.query(sql);
    },
  });
  const direct = handle(pool, () => true);

  return {
    kind: "postgres",
    schema,
    query(sql, params) {
      scope.assertOutside("query");
      return direct.query(sql, params);
    },
    exec(sql) {
      scope.assertOutside("exec");
      return direct.exec(sql);
    },
    async transaction(fn) {
      scope.assertOutside("transaction");
      const client = await pool.connect();
      // A connection whose ROLLBACK failed is in an unknown state: destroy it instead of reusing it.
      let broken: Error | undefined;
      try {
        await client.query("BEGIN");
        let open = true;
        try {
          const result = await scope.run(() => fn(handle(client, () => open)));
          await client.query("COMMIT");
          return result;
        } catch (error) {
          await client.query("ROLLBACK").catch((rollbackError: Error) => {
            broken = rollbackError;
          });
          throw error;
        } finally {
          open = false;
        }
      } finally {
        client.release(broken);
      }
    },
    async dropSchema() {
      scope.assertOutside("dropSchema");
      if (schema === undefined) throw noSchemaError();
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    },
    async close() {
      if (closed) return;
      closed = true;
      await pool.end();
    },
  };
}
