import pg from "pg";
import type { Logger } from "pino";
import { assertSchemaName } from "./assertSchemaName.ts";
import { notificationChannel } from "./notificationChannel.ts";
import { PostgresNotifications } from "./postgresNotifications.ts";
import { PreparedStatements } from "./postgresPreparedStatements.ts";

export { MAX_LOST_STATEMENTS, MAX_PREPARED_TEXTS } from "./postgresPreparedStatements.ts";

import type { Queryable, SqlParam, Store } from "./store.ts";
import { noSchemaError, transactionEndedError } from "./storeErrors.ts";
import { createTransactionScope } from "./transactionScope.ts";

const INT8_OID = 20;
const NUMERIC_OID = 1700;

type PostgresStoreOptions = {
  databaseUrl: string;
  schema?: string | undefined;
  maxConnections?: number | undefined;
  /**
   * Run parameterised statements as named prepared statements, each text parsed once per connection
   * (default true). Turn off behind a pooler that cannot keep them (PgBouncer before 1.21 in
   * transaction mode).
   */
  preparedStatements?: boolean | undefined;
  logger?: Logger | undefined;
};

/**
 * A PostgreSQL server reached through a `pg` pool. Each transaction holds one pooled connection from
 * BEGIN to COMMIT/ROLLBACK; plain queries take any free connection. With a `schema`, every pooled
 * connection starts with `search_path` set to it (a startup parameter, so no query can run before it).
 * Its parts: named prepared statements (postgresPreparedStatements.ts) and the work notifications'
 * connection (postgresNotifications.ts).
 */
export async function createPostgresStore(options: PostgresStoreOptions): Promise<Store> {
  const schema = options.schema === undefined ? undefined : assertSchemaName(options.schema);
  const pool = await openPool(options, schema);
  const scope = createTransactionScope();
  let closed = false;
  const statements = new PreparedStatements({
    prepare: options.preparedStatements !== false,
    logger: options.logger,
  });
  const handle = (
    client: pg.Pool | pg.PoolClient,
    isOpen: () => boolean,
    inTransaction: boolean,
  ): Queryable => ({
    async query<Row>(sql: string, params: readonly SqlParam[] = []) {
      if (!isOpen()) throw transactionEndedError();
      return statements.run<Row>(client, sql, params, inTransaction);
    },
    async exec(sql: string) {
      if (!isOpen()) throw transactionEndedError();
      // Without parameters pg uses the simple-query protocol, which accepts several statements.
      await client.query(sql);
    },
  });
  const direct = handle(pool, () => true, false);
  const notifications = new PostgresNotifications({
    databaseUrl: options.databaseUrl,
    logger: options.logger,
  });

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
      return inTransaction(client, options.logger, async (isOpen) =>
        scope.run(() => fn(handle(client, isOpen, true))),
      );
    },
    listen: (name, fn) => notifications.listen(notificationChannel(schema, name), fn),
    async dropSchema() {
      scope.assertOutside("dropSchema");
      if (schema === undefined) throw noSchemaError();
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    },
    async close() {
      if (closed) return;
      closed = true;
      await notifications.close();
      await pool.end();
    },
  };
}

/** The pool, its connections guarded against unhandled errors, the server reached and the schema made. */
async function openPool(options: PostgresStoreOptions, schema: string | undefined): Promise<pg.Pool> {
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
  // And every connection keeps a listener of its own for its whole life: pg-pool attaches one only while
  // a connection is idle, and a query through `pool.query` only until its callback, so a server that
  // ends the connection in between (pg_terminate_backend, a failover) emitted 'error' on a client with
  // no listener, which crashed the process (seen in the fault suite under many terminations). A query
  // in flight still fails on its own, and a connection that failed is not queryable, so the pool drops it.
  pool.on("connect", (client) => {
    client.on("error", (error) => options.logger?.debug({ err: error }, "PostgreSQL connection failed"));
  });
  // Fail at start, not on the first request, when the server is unreachable.
  await pool.query("SELECT 1");
  if (schema !== undefined) {
    // Concurrent `CREATE SCHEMA IF NOT EXISTS` can still collide on the catalog; the loser's schema exists.
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch(async (error: unknown) => {
      const exists = await pool.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
      if (exists.rowCount === 0) throw error;
    });
  }
  return pool;
}

/**
 * Runs `body` between BEGIN and COMMIT (ROLLBACK when it throws) on a checked-out connection, which is
 * released afterwards, or destroyed when it failed. `isOpen` turns false once the transaction ended.
 */
async function inTransaction<T>(
  client: pg.PoolClient,
  logger: Logger | undefined,
  body: (isOpen: () => boolean) => Promise<T>,
): Promise<T> {
  // A connection whose ROLLBACK failed is in an unknown state: destroy it instead of reusing it.
  let broken: Error | undefined;
  // A checked-out client has no pool listener: a connection the server ends between two queries
  // (pg_terminate_backend, a restart, a network cut) emits 'error' here, which unhandled would crash
  // the process. The transaction's next query fails on its own; the connection is destroyed on release.
  const onError = (error: Error) => {
    broken ??= error;
    logger?.warn({ err: error }, "PostgreSQL connection failed during a transaction");
  };
  client.on("error", onError);
  try {
    await client.query("BEGIN");
    let open = true;
    try {
      const result = await body(() => open);
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
    client.removeListener("error", onError);
  }
}
