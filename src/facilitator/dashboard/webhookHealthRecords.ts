/**
 * How the provider's webhook endpoints have been answering, from their recorded HTTP attempts: the
 * share that succeeded, the latest failure, and whether the endpoint is failing now. A delivery keeps
 * the status `pending` while it is retried, so an endpoint that refuses every connection looks merely
 * slow in the deliveries list; its attempts tell the truth.
 */
import { z } from "zod";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";

/** Attempts per endpoint the success rate is taken over (the latest ones, within `HEALTH_DAYS`). */
export const HEALTH_WINDOW = 20;
/** An endpoint whose latest this many attempts all failed is failing. */
export const FAILING_AFTER = 3;
const HEALTH_DAYS = 7;

const HealthRowSchema = z.object({
  endpoint_id: z.string(),
  attempts: SafeIntColumnSchema,
  succeeded: SafeIntColumnSchema,
  latest_failed: SafeIntColumnSchema,
  last_failure_at: TimestampColumnSchema.nullable(),
  last_failure_status: z.number().int().nullable(),
  last_failure_error: z.string().nullable(),
});

export type WebhookHealth = {
  /** Attempts counted (at most HEALTH_WINDOW, from the last HEALTH_DAYS days). */
  attempts: number;
  succeeded: number;
  /** True when the latest FAILING_AFTER attempts (or all, if fewer) failed. */
  failing: boolean;
  lastFailure?: { at: Date; reason: string } | undefined;
};

/** The health of each of the provider's endpoints that had attempts lately, by endpoint id. */
export async function webhookHealth(
  db: Queryable,
  provider: string,
  now: Date,
): Promise<Map<string, WebhookHealth>> {
  const rows = await queryParsed(
    db,
    HealthRowSchema,
    `WITH recent AS (
       SELECT d.endpoint_id, a.attempted_at, a.status_code, a.error,
         coalesce(a.status_code BETWEEN 200 AND 299, false) AS ok,
         row_number() OVER (PARTITION BY d.endpoint_id ORDER BY a.attempted_at DESC, a.id DESC) AS n
       FROM webhook_attempts a
       JOIN webhook_deliveries d ON d.id = a.delivery_id
       JOIN webhook_endpoints e ON e.id = d.endpoint_id
       WHERE e.provider = $1 AND a.attempted_at > $2::timestamptz - make_interval(days => $3)
     ), failures AS (
       SELECT DISTINCT ON (endpoint_id) endpoint_id, attempted_at, status_code, error
       FROM recent WHERE n <= $4 AND NOT ok ORDER BY endpoint_id, n
     )
     SELECT r.endpoint_id, count(*) AS attempts, count(*) FILTER (WHERE r.ok) AS succeeded,
       count(*) FILTER (WHERE NOT r.ok AND r.n <= $5) AS latest_failed,
       f.attempted_at AS last_failure_at, f.status_code AS last_failure_status, f.error AS last_failure_error
     FROM recent r LEFT JOIN failures f ON f.endpoint_id = r.endpoint_id
     WHERE r.n <= $4
     GROUP BY r.endpoint_id, f.attempted_at, f.status_code, f.error`,
    [provider.toLowerCase(), now, HEALTH_DAYS, HEALTH_WINDOW, FAILING_AFTER],
  );
  return new Map(
    rows.map((row) => [
      row.endpoint_id,
      {
        attempts: row.attempts,
        succeeded: row.succeeded,
        failing: row.latest_failed === Math.min(FAILING_AFTER, row.attempts),
        lastFailure:
          row.last_failure_at === null
            ? undefined
            : {
                at: row.last_failure_at,
                reason:
                  row.last_failure_status !== null
                    ? `HTTP ${row.last_failure_status}${row.last_failure_error === null ? "" : `: ${row.last_failure_error}`}`
                    : (row.last_failure_error ?? "no answer"),
              },
      },
    ]),
  );
}
