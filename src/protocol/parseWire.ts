/**
 * Parsing untrusted values against a zod schema with the failure turned into a `TollgateError`, so a
 * trust boundary never leaks a `ZodError` (or a 500) for bad input.
 */
import type { z } from "zod";
import { type ErrorCode, TollgateError } from "./errors.ts";

/** One schema violation as it appears in an error's `details.issues`. */
export type IssueSummary = { path: string; message: string };

/** At most this many issues are reported: enough to fix a request, bounded for hostile ones. */
const MAX_REPORTED_ISSUES = 10;

/** A short, serializable account of what failed: `[{ path: "accepts.0.amount", message }]`. */
export function summarizeIssues(issues: readonly z.core.$ZodIssue[]): IssueSummary[] {
  return issues.slice(0, MAX_REPORTED_ISSUES).map((issue) => ({
    path: issue.path.map((key) => String(key)).join("."),
    message: issue.message,
  }));
}

export type ParseWireOptions = {
  /** Code of the thrown error; `InvalidRequest` unless the boundary has a more specific one. */
  code?: ErrorCode;
  /** What was being parsed, for the message: `"payment proof"`. */
  what?: string;
};

/**
 * The schema's output for `value`, or a `TollgateError` (`InvalidRequest` by default) whose
 * `details.issues` summarise the violations. Exceptions thrown inside the schema's own transforms
 * or refinements are caught and reported the same way.
 */
export function parseWire<T>(schema: z.ZodType<T>, value: unknown, options: ParseWireOptions = {}): T {
  const code = options.code ?? "InvalidRequest";
  const what = options.what ?? "value";
  let result: ReturnType<typeof schema.safeParse>;
  try {
    result = schema.safeParse(value);
  } catch (cause) {
    throw new TollgateError(code, `${what} is malformed`, { cause });
  }
  if (result.success) return result.data;
  throw new TollgateError(code, `${what} is malformed`, {
    details: { issues: summarizeIssues(result.error.issues) },
    cause: result.error,
  });
}
