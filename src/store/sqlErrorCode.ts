/**
 * The SQLSTATE of a database error from either backend (both put it on `code`), or `undefined` for
 * anything else. See https://www.postgresql.org/docs/current/errcodes-appendix.html.
 */
export function sqlErrorCode(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null || !("code" in error)) return undefined;
  const code = (error as { code: unknown }).code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** A write refused by a UNIQUE or PRIMARY KEY constraint (SQLSTATE 23505). */
export function isUniqueViolation(error: unknown): boolean {
  return sqlErrorCode(error) === "23505";
}
