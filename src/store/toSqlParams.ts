import type { SqlParam } from "./store.ts";

/**
 * Normalizes parameters so both drivers bind them the same way (see the value mapping in store.ts):
 * left alone, `pg` would fail to JSON-encode an object holding a `bigint`, and PGlite would bind an
 * object sent to a text column as "[object Object]".
 */
export function toSqlParams(params: readonly SqlParam[]): unknown[] {
  return params.map(toSqlParam);
}

function toSqlParam(value: SqlParam): unknown {
  if (value === undefined || value === null) return null;
  if (typeof value === "bigint") return value.toString();
  if (typeof value !== "object") return value;
  if (value instanceof Date || value instanceof Uint8Array) return value;
  if (Array.isArray(value)) return (value as readonly SqlParam[]).map(toSqlParam);
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
}
