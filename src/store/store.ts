/**
 * The store interface every Tollgate module persists through (docs/operations-storage.md). One SQL dialect,
 * PostgreSQL's, spoken by two backends: embedded PGlite (the default) and a real PostgreSQL server.
 *
 * Value mapping, identical on both backends (so a query behaves the same wherever it runs):
 * - Parameters: `bigint` is bound as its decimal string, so it fits `numeric`, `bigint` and `text`
 *   columns; a plain object is bound as JSON text (for `jsonb`); an array is bound as a PostgreSQL
 *   array (bind a JSON *array* as `JSON.stringify(value)`); `Date`, `Uint8Array` (bytea), strings,
 *   numbers, booleans and `null` are bound as themselves.
 * - Results: `numeric` and `int8` (`bigint`, `bigserial`, `count(*)`) come back as decimal strings,
 *   never as lossy numbers; parse them with `BigintColumnSchema`/`SafeIntColumnSchema`. `int2`/`int4`
 *   are numbers, `timestamptz` is a `Date`, `json`/`jsonb` are parsed values, `bytea` is a `Uint8Array`.
 */
import type { Logger } from "pino";
import type { LockDataDirOptions } from "./lockDataDir.ts";
import type { PgliteMaintenanceOptions } from "./pgliteMaintenance.ts";

/** A value that may be bound to a `$n` placeholder. */
export type SqlParam =
  | string
  | number
  | bigint
  | boolean
  | null
  | undefined
  | Date
  | Uint8Array
  | { readonly [key: string]: unknown }
  | readonly SqlParam[];

/** Something SQL can be sent to: the store itself, or the `tx` handle inside a transaction. */
export type Queryable = {
  /**
   * Runs one statement with `$1…` placeholders and returns its rows (the rows of `RETURNING` for
   * writes, `[]` when there are none). Rows are not validated: read them through `queryParsed`.
   */
  query<Row = Record<string, unknown>>(sql: string, params?: readonly SqlParam[]): Promise<Row[]>;
  /** Runs a script of one or more statements without parameters (migrations, DDL). */
  exec(sql: string): Promise<void>;
};

export type StoreKind = "pglite" | "postgres";

/** A `Queryable` that owns its connection(s) and can run transactions. */
export type Store = Queryable & {
  readonly kind: StoreKind;
  /** The PostgreSQL schema holding every table, or `undefined` for the default (`public`). */
  readonly schema: string | undefined;
  /**
   * Runs `fn` inside BEGIN … COMMIT, rolling back if it throws. Inside `fn`, send SQL through `tx`
   * only: using the store itself there throws, since on PGlite (one connection) it would wait for
   * the transaction forever and on PostgreSQL it would run outside the transaction.
   */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /**
   * Calls `fn` whenever the work notification `name` is sent on this database (the triggers of
   * migration 0120, once per committed transaction): by this process, and on PostgreSQL by any other.
   * A notification can be lost (a dropped connection), so a listener keeps a backstop read. Resolves once
   * listening; the function it resolves with stops listening.
   */
  listen(name: string, fn: () => void): Promise<() => Promise<void>>;
  /** Drops the store's schema and everything in it (for test isolation). Throws if no schema was set. */
  dropSchema(): Promise<void>;
  /** Waits for work in flight, then releases the database. */
  close(): Promise<void>;
};

export type StoreOptions = {
  /** `postgres://…`: use this PostgreSQL server. Without it, an embedded PGlite database is used. */
  databaseUrl?: string | undefined;
  /** PGlite data directory (default `.tollgate/pglite`); `"memory://"` keeps the database in memory. */
  dataDir?: string | undefined;
  /** PGlite on disk: how long to wait for another holder of `dataDir` (default: refuse at once). */
  lock?: LockDataDirOptions | undefined;
  /**
   * PGlite: when to vacuum and analyse its tables, which PGlite has no autovacuum for (default: every
   * 30 s look for a quiet moment, at most 5 min apart under load; `false`: never on its own).
   */
  maintenance?: PgliteMaintenanceOptions | false | undefined;
  /** Put every table into this schema (created if missing). Lowercase letters, digits, `_`. */
  schema?: string | undefined;
  /** Apply pending migrations before returning (default true). */
  migrate?: boolean | undefined;
  /** Largest number of PostgreSQL connections in the pool (default 10). */
  maxConnections?: number | undefined;
  /**
   * PostgreSQL: run parameterised statements prepared, parsed once per connection (default true); off
   * behind a pooler that cannot keep prepared statements (docs/operations-storage.md).
   */
  preparedStatements?: boolean | undefined;
  logger?: Logger | undefined;
};
