import type { z } from "zod";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import type { Queryable, SqlParam } from "./store.ts";

/**
 * Runs a query and parses every row with `schema` (rows read back are a trust boundary too: a
 * column renamed by a migration must fail here, loudly, not as `undefined` three calls later).
 * @example
 * const rows = await queryParsed(store, PaymentRowSchema, "SELECT * FROM payments WHERE status = $1", ["pending"]);
 */
export async function queryParsed<S extends z.ZodType>(
  db: Queryable,
  schema: S,
  sql: string,
  params: readonly SqlParam[] = [],
): Promise<z.output<S>[]> {
  const rows = await db.query(sql, params);
  return rows.map((row, index) => {
    const parsed = schema.safeParse(row);
    if (!parsed.success) {
      throw new TollgateError(ErrorCode.Internal, "a row read from the store does not match its schema", {
        details: { sql, row: index, issues: parsed.error.issues },
        cause: parsed.error,
      });
    }
    return parsed.data;
  });
}

/** Like `queryParsed`, for a query that yields at most one row: the row, or `undefined`. */
export async function queryOneParsed<S extends z.ZodType>(
  db: Queryable,
  schema: S,
  sql: string,
  params: readonly SqlParam[] = [],
): Promise<z.output<S> | undefined> {
  const rows = await queryParsed(db, schema, sql, params);
  if (rows.length > 1) {
    throw new TollgateError(ErrorCode.Internal, `expected at most one row, got ${rows.length}`, {
      details: { sql },
    });
  }
  return rows[0];
}
