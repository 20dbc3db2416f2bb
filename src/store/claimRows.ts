import type { z } from "zod";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import { queryParsed } from "./queryParsed.ts";
import type { Queryable, SqlParam } from "./store.ts";

export type ClaimRowsOptions = {
  /** Table holding the work items; a plain lowercase identifier. */
  table: string;
  /** SQL condition selecting claimable rows, e.g. `status = 'pending'`; may use `$1…` from `params`. */
  where: string;
  /** SQL assignments marking rows claimed, e.g. `status = 'submitted', updated_at = now()`. */
  set: string;
  /** Which rows to take first (default `id`). */
  orderBy?: string;
  /** Largest number of rows to claim. */
  limit: number;
  /** Values for the placeholders in `where` and `set`. */
  params?: readonly SqlParam[];
  /** Primary-key column (default `id`). */
  key?: string;
};

/**
 * Claims up to `limit` rows for this worker in one statement and returns them as updated: rows that
 * another worker holds locked are skipped (`FOR UPDATE SKIP LOCKED`) rather than waited for, and the
 * update moves claimed rows out of `where`, so concurrent claimers on several processes always get
 * disjoint rows. `where`, `set` and `orderBy` are SQL written in code, never user input.
 * The returned rows are in no particular order.
 * @example
 * const batch = await claimRows(store, PaymentRowSchema, {
 *   table: "payments", where: "status = 'pending'", set: "status = 'submitted', updated_at = now()", limit: 50 });
 */
export async function claimRows<S extends z.ZodType>(
  db: Queryable,
  schema: S,
  options: ClaimRowsOptions,
): Promise<z.output<S>[]> {
  const table = identifier(options.table);
  const key = identifier(options.key ?? "id");
  if (!Number.isSafeInteger(options.limit) || options.limit < 1) {
    throw new TollgateError(
      ErrorCode.Internal,
      `claimRows limit must be a positive integer: ${options.limit}`,
    );
  }
  const params = options.params ?? [];
  const sql = `UPDATE ${table} SET ${options.set}
    WHERE ${key} IN (
      SELECT ${key} FROM ${table} WHERE ${options.where}
      ORDER BY ${options.orderBy ?? key} LIMIT $${params.length + 1}
      FOR UPDATE SKIP LOCKED)
    RETURNING *`;
  return queryParsed(db, schema, sql, [...params, options.limit]);
}

function identifier(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) {
    throw new TollgateError(ErrorCode.Internal, `not a plain SQL identifier: ${JSON.stringify(name)}`);
  }
  return name;
}
