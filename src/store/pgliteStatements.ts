import { type messages, type PGlite, protocol } from "@electric-sql/pglite";

type BackendMessage = messages.BackendMessage;

type Column = { readonly name: string; readonly parse: ((text: string) => unknown) | undefined };

type Statement = {
  readonly name: string;
  readonly serializers: readonly (((value: unknown) => string) | undefined)[];
  /** The result's columns, or `undefined` for a statement that returns no rows. */
  readonly columns: readonly Column[] | undefined;
};

/** How many statement texts stay prepared at once; the oldest is closed to make room. */
const DEFAULT_LIMIT = 256;

const { parse, describe, bind, execute, close, sync } = protocol.serialize;
const SYNC = sync();
const EXECUTE = execute({});

function joined(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * Runs parameterised statements on PGlite as named prepared statements, each sent in one call into
 * its WebAssembly module. PGlite's own `query` sends six protocol messages in five calls (parse,
 * describe, bind, describe, execute, sync) and parses and plans the text afresh every time; here a
 * text is parsed and described once (its parameter and result types kept), and every later run is
 * one bind, execute and sync. Rows come back exactly as `query` returns them: the same parsers by
 * type, an object per row keyed by column name.
 *
 * Callers hold PGlite's locks (`run` neither takes nor needs them) and say whether a transaction is
 * open, which decides whether PGlite's file system is synced after the statement, as `query` does.
 * A script that may change the schema goes through `exec`, which forgets every prepared statement
 * first, so that no cached plan outlives the tables it was made for.
 */
export class PgliteStatements {
  readonly #db: PGlite;
  readonly #limit: number;
  readonly #statements = new Map<string, Statement>();
  /** Close messages for evicted statements, sent ahead of the next prepare. */
  #closing: Uint8Array[] = [];
  #counter = 0;

  constructor(db: PGlite, limit = DEFAULT_LIMIT) {
    this.#db = db;
    this.#limit = limit;
  }

  /** How many statements are prepared (tests). */
  get size(): number {
    return this.#statements.size;
  }

  async run<Row>(sql: string, params: readonly unknown[], inTransaction: boolean): Promise<Row[]> {
    const statement = this.#statements.get(sql) ?? (await this.#prepare(sql));
    const values: (string | null)[] = new Array(params.length);
    for (let i = 0; i < params.length; i++) {
      const value = params[i];
      if (value === null || value === undefined) values[i] = null;
      else {
        const serialize = statement.serializers[i];
        values[i] = serialize === undefined ? String(value) : serialize(value);
      }
    }
    const message = joined([bind({ statement: statement.name, values }), EXECUTE, SYNC]);
    const messages = await this.#send(message, sql, params, !inTransaction);
    return statement.columns === undefined ? [] : rowsOf<Row>(messages, statement.columns);
  }

  /**
   * Forgets every prepared statement, for a script (migrations, DDL) that may drop or change what they
   * were planned against; returns the SQL to put in front of that script (`DEALLOCATE ALL;`, or
   * nothing when none is prepared).
   */
  forget(): string {
    if (this.#statements.size === 0) return "";
    this.#statements.clear();
    this.#closing = [];
    return "DEALLOCATE ALL;\n";
  }

  async #prepare(sql: string): Promise<Statement> {
    const name = `tg_${++this.#counter}`;
    if (this.#statements.size >= this.#limit) {
      const oldest = this.#statements.keys().next().value as string;
      const evicted = this.#statements.get(oldest) as Statement;
      this.#statements.delete(oldest);
      this.#closing.push(close({ type: "S", name: evicted.name }));
    }
    const closing = this.#closing;
    this.#closing = [];
    const messages = await this.#send(
      joined([...closing, parse({ name, text: sql }), describe({ type: "S", name }), SYNC]),
      sql,
      undefined,
      false,
    );
    const db = this.#db;
    let serializers: (((value: unknown) => string) | undefined)[] = [];
    let columns: Column[] | undefined;
    for (const message of messages) {
      if (message.name === "parameterDescription") {
        serializers = (message as messages.ParameterDescriptionMessage).dataTypeIDs.map(
          (oid) => db.serializers[oid],
        );
      } else if (message.name === "rowDescription") {
        columns = (message as messages.RowDescriptionMessage).fields.map((field) => ({
          name: field.name,
          parse: db.parsers[field.dataTypeID] as Column["parse"],
        }));
      }
    }
    const statement: Statement = { name, serializers, columns };
    this.#statements.set(sql, statement);
    return statement;
  }

  async #send(
    message: Uint8Array,
    sql: string,
    params: readonly unknown[] | undefined,
    syncToFs: boolean,
  ): Promise<BackendMessage[]> {
    try {
      return await this.#db.execProtocolStream(message, { syncToFs });
    } catch (error) {
      // Like PGlite's own `query`: a database error names the statement it came from.
      if (typeof error === "object" && error !== null && "code" in error) {
        Object.assign(error, { query: sql, params });
      }
      throw error;
    }
  }
}

function rowsOf<Row>(messages: readonly BackendMessage[], columns: readonly Column[]): Row[] {
  const rows: Row[] = [];
  for (const message of messages) {
    if (message.name !== "dataRow") continue;
    const fields = (message as messages.DataRowMessage).fields;
    const row: Record<string, unknown> = {};
    for (let i = 0; i < columns.length; i++) {
      const column = columns[i] as Column;
      const text = fields[i] ?? null;
      row[column.name] = text === null ? null : column.parse === undefined ? text : column.parse(text);
    }
    rows.push(row as Row);
  }
  return rows;
}
