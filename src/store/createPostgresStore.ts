import pg from "pg";
import type { Logger } from "pino";
import { assertSchemaName } from "./assertSchemaName.ts";
import { notificationChannel } from "./notificationChannel.ts";
import type { Queryable, SqlParam, Store } from "./store.ts";
import { noSchemaError, transactionEndedError } from "./storeErrors.ts";
import { toSqlParams } from "./toSqlParams.ts";
import { createTransactionScope } from "./transactionScope.ts";

const INT8_OID = 20;
const NUMERIC_OID = 1700;
/** Statement texts a store prepares at most; texts beyond these run unnamed, as before. */
export const MAX_PREPARED_TEXTS = 1_000;
/** Prepared statements found missing on the server after which a store stops preparing any. */
export const MAX_LOST_STATEMENTS = 16;

/**
 * A PostgreSQL server reached through a `pg` pool. Each transaction holds one pooled connection from
 * BEGIN to COMMIT/ROLLBACK; plain queries take any free connection. With a `schema`, every pooled
 * connection starts with `search_path` set to it (a startup parameter, so no query can run before it).
 */
export async function createPostgresStore(options: {
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
  const scope = createTransactionScope();
  let closed = false;

  // ---- prepared statements ---------------------------------------------------------------------------
  // Each parameterised text gets a name of its own the first time it runs; the driver parses it once per
  // connection under that name and afterwards sends only bind and execute. PostgreSQL then also keeps
  // its plan (its default `plan_cache_mode`: planned for the parameters five times, then a generic plan
  // where that is estimated no dearer; ANALYZE invalidates kept plans). Texts without parameters keep
  // the simple protocol (a script of several statements stays allowed).
  let prepare = options.preparedStatements !== false;
  /** Statements the server did not hold when the driver ran them by name (see `run`). */
  let lost = 0;
  const names = new Map<string, string>();
  let named = 0;
  const nameOf = (sql: string, params: readonly SqlParam[]): string | undefined => {
    if (!prepare || params.length === 0) return undefined;
    let name = names.get(sql);
    if (name === undefined && names.size < MAX_PREPARED_TEXTS) {
      name = `tollgate_${(named++).toString(36)}`;
      names.set(sql, name);
    }
    return name;
  };
  const run = async <Row>(
    client: pg.Pool | pg.PoolClient,
    sql: string,
    params: readonly SqlParam[],
    inTransaction: boolean,
  ): Promise<Row[]> => {
    const values = toSqlParams(params);
    const name = nameOf(sql, params);
    try {
      return (await client.query({ name, text: sql, values })).rows as Row[];
    } catch (error) {
      if (name === undefined || !isStalePreparedStatement(error)) throw error;
      // The statement this connection kept no longer fits (a table it reads changed shape) or is gone
      // (a pooler dropped it): the text runs under a new name from now on, parsed afresh. Outside a
      // transaction it runs again at once; PostgreSQL refused it before executing anything.
      if (names.get(sql) === name) names.delete(sql);
      // A server that keeps losing them sits behind a pooler handing each statement to another
      // session (PgBouncer before 1.21 in transaction mode): stop naming statements at all.
      if ((error as { code?: unknown }).code !== "0A000" && ++lost === MAX_LOST_STATEMENTS && prepare) {
        prepare = false;
        names.clear();
        options.logger?.warn(
          { lost },
          "PostgreSQL keeps losing prepared statements (a pooler in transaction mode?): statements now run unnamed; set preparedStatements: false to start so",
        );
      }
      if (inTransaction) throw error;
      return (await client.query({ name: nameOf(sql, params), text: sql, values })).rows as Row[];
    }
  };

  const handle = (
    client: pg.Pool | pg.PoolClient,
    isOpen: () => boolean,
    inTransaction: boolean,
  ): Queryable => ({
    async query<Row>(sql: string, params: readonly SqlParam[] = []) {
      if (!isOpen()) throw transactionEndedError();
      return run<Row>(client, sql, params, inTransaction);
    },
    async exec(sql: string) {
      if (!isOpen()) throw transactionEndedError();
      // Without parameters pg uses the simple-query protocol, which accepts several statements.
      await client.query(sql);
    },
  });
  const direct = handle(pool, () => true, false);

  // ---- work notifications: one connection of its own LISTENs for every channel of this store --------
  const listeners = new Map<string, Set<() => void>>();
  let listener: pg.Client | undefined;
  let connecting: Promise<pg.Client> | undefined;
  let reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  const quote = (channel: string) => `"${channel.replaceAll('"', '""')}"`;
  const tellAll = () => {
    for (const fns of listeners.values()) for (const fn of fns) fn();
  };
  function connectListener(): Promise<pg.Client> {
    connecting ??= (async () => {
      const client = new pg.Client({ connectionString: options.databaseUrl });
      const lost = (error?: Error) => {
        if (listener !== client) return;
        listener = undefined;
        connecting = undefined;
        client.end().catch(() => undefined);
        if (closed) return;
        options.logger?.warn({ err: error }, "PostgreSQL notification connection lost; reconnecting");
        reconnectTimer ??= setTimeout(() => {
          reconnectTimer = undefined;
          // Whatever was sent while no one listened is found by the listeners' reads now.
          connectListener().then(tellAll, () => reconnectTimer ?? lost());
        }, 1_000);
        reconnectTimer.unref?.();
      };
      client.on("error", lost);
      client.on("end", () => lost());
      client.on("notification", (message) => {
        for (const fn of listeners.get(message.channel) ?? []) fn();
      });
      try {
        await client.connect();
        for (const channel of listeners.keys()) await client.query(`LISTEN ${quote(channel)}`);
      } catch (error) {
        connecting = undefined;
        client.end().catch(() => undefined);
        throw error;
      }
      listener = client;
      return client;
    })();
    return connecting;
  }

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
      // A checked-out client has no pool listener: a connection the server ends between two queries
      // (pg_terminate_backend, a restart, a network cut) emits 'error' here, which unhandled would crash
      // the process. The transaction's next query fails on its own; the connection is destroyed on release.
      const onError = (error: Error) => {
        broken ??= error;
        options.logger?.warn({ err: error }, "PostgreSQL connection failed during a transaction");
      };
      client.on("error", onError);
      try {
        await client.query("BEGIN");
        let open = true;
        try {
          const result = await scope.run(() => fn(handle(client, () => open, true)));
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
    },
    async listen(name, fn) {
      const channel = notificationChannel(schema, name);
      let fns = listeners.get(channel);
      const first = fns === undefined;
      if (fns === undefined) {
        fns = new Set();
        listeners.set(channel, fns);
      }
      fns.add(fn);
      const client = await connectListener();
      if (first) await client.query(`LISTEN ${quote(channel)}`);
      return async () => {
        fns.delete(fn);
        if (fns.size > 0 || listeners.get(channel) !== fns) return;
        listeners.delete(channel);
        await listener?.query(`UNLISTEN ${quote(channel)}`).catch(() => undefined);
      };
    },
    async dropSchema() {
      scope.assertOutside("dropSchema");
      if (schema === undefined) throw noSchemaError();
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    },
    async close() {
      if (closed) return;
      closed = true;
      if (reconnectTimer !== undefined) clearTimeout(reconnectTimer);
      const client = listener ?? (await connecting?.catch(() => undefined));
      listener = undefined;
      await client?.end().catch(() => undefined);
      await pool.end();
    },
  };
}

/**
 * PostgreSQL refused a prepared statement it cannot run as prepared: its kept plan's result type changed
 * (0A000, a column added to or dropped from a table it reads with `*`), or the connection does not hold
 * it (26000) or already holds one of its name (42P05), as behind a pooler that moves sessions. The
 * first is told apart from other 0A000 refusals by the server function that raised it, not by its
 * message, which the server translates under another `lc_messages`.
 */
function isStalePreparedStatement(error: unknown): boolean {
  const { code, routine } = (error ?? {}) as { code?: unknown; routine?: unknown };
  if (code === "26000" || code === "42P05") return true;
  return code === "0A000" && routine === "RevalidateCachedQuery";
}
