import { ErrorCode, TollgateError } from "../protocol/errors.ts";

/**
 * Schema names are spliced into SQL (`CREATE SCHEMA`, `search_path`), so only plain lowercase
 * identifiers are accepted: they need no quoting and cannot carry SQL.
 */
export function assertSchemaName(schema: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema) || schema.startsWith("pg_")) {
    throw new TollgateError(
      ErrorCode.InvalidRequest,
      `invalid store schema name: ${JSON.stringify(schema)}`,
      {
        details: { schema },
      },
    );
  }
  return schema;
}
