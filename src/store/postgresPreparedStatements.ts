/**
 * Named prepared statements for a PostgreSQL store. Each parameterised text gets a name of its own the
 * first time it runs; the driver parses it once per connection under that name and afterwards sends only
 * bind and execute. PostgreSQL then also keeps its plan (its default `plan_cache_mode`: planned for the
 * parameters five times, then a generic plan where that is estimated no dearer; ANALYZE invalidates kept
 * plans). Texts without parameters keep the simple protocol (a script of several statements stays allowed).
 *
 * Invariants:
 * - At most MAX_PREPARED_TEXTS texts are named; the others run unnamed.
 * - Once MAX_LOST_STATEMENTS named statements were found missing on the server, nothing is named again.
 */
import type pg from "pg";
import type { Logger } from "pino";
import type { SqlParam } from "./store.ts";
import { toSqlParams } from "./toSqlParams.ts";

/** Statement texts a store prepares at most; texts beyond these run unnamed, as before. */
export const MAX_PREPARED_TEXTS = 1_000;
/** Prepared statements found missing on the server after which a store stops preparing any. */
export const MAX_LOST_STATEMENTS = 16;

export class PreparedStatements {
  #prepare: boolean;
  /** Statements the server did not hold when the driver ran them by name (see `run`). */
  #lost = 0;
  readonly #names = new Map<string, string>();
  #named = 0;
  readonly #logger: Logger | undefined;

  constructor(options: { prepare: boolean; logger?: Logger | undefined }) {
    this.#prepare = options.prepare;
    this.#logger = options.logger;
  }

  /** The name `sql` runs under, or undefined when it runs unnamed. */
  nameOf(sql: string, params: readonly SqlParam[]): string | undefined {
    if (!this.#prepare || params.length === 0) return undefined;
    let name = this.#names.get(sql);
    if (name === undefined && this.#names.size < MAX_PREPARED_TEXTS) {
      name = `tollgate_${(this.#named++).toString(36)}`;
      this.#names.set(sql, name);
    }
    return name;
  }

  /** Runs `sql` on `client`, by name when it has one; a stale statement outside a transaction runs again. */
  async run<Row>(
    client: pg.Pool | pg.PoolClient,
    sql: string,
    params: readonly SqlParam[],
    inTransaction: boolean,
  ): Promise<Row[]> {
    const values = toSqlParams(params);
    const name = this.nameOf(sql, params);
    try {
      return (await client.query({ name, text: sql, values })).rows as Row[];
    } catch (error) {
      if (name === undefined || !isStalePreparedStatement(error)) throw error;
      // The statement this connection kept no longer fits (a table it reads changed shape) or is gone
      // (a pooler dropped it): the text runs under a new name from now on, parsed afresh. Outside a
      // transaction it runs again at once; PostgreSQL refused it before executing anything.
      if (this.#names.get(sql) === name) this.#names.delete(sql);
      this.#noteLost(error);
      if (inTransaction) throw error;
      return (await client.query({ name: this.nameOf(sql, params), text: sql, values })).rows as Row[];
    }
  }

  /**
   * A server that keeps losing them sits behind a pooler handing each statement to another session
   * (PgBouncer before 1.21 in transaction mode): stop naming statements at all.
   */
  #noteLost(error: unknown): void {
    if (
      (error as { code?: unknown }).code !== "0A000" &&
      ++this.#lost === MAX_LOST_STATEMENTS &&
      this.#prepare
    ) {
      this.#prepare = false;
      this.#names.clear();
      this.#logger?.warn(
        { lost: this.#lost },
        "PostgreSQL keeps losing prepared statements (a pooler in transaction mode?): statements now run unnamed; set preparedStatements: false to start so",
      );
    }
  }
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
