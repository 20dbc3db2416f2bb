/**
 * A provider's revenue over a time range (docs/analytics.md), from two sources that never overlap:
 * - one-time payments: `payments` rows settled to the provider (`pay_to`), at `settled_at`;
 * - subscription charges (`subscription.created` charges the first period, `subscription.renewed`
 *   each later one) and metered overage (`allowance.deducted`) from the event log, where the
 *   subscription indexer names the plan's `provider`, the `subscriber` who paid and the `amount`, at
 *   the time the facilitator recorded them; an event whose log a chain reorganisation removed is marked
 *   undone by the indexer and no charge.
 *
 * Volume is exact (SQL `numeric` sums, read back as bigint). Unique payers are counted per group, so a
 * day's payers are not the sum of its schemes' payers when one payer used two schemes.
 */
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type {
  AnalyticsBreakdown,
  AnalyticsBucket,
  AnalyticsScheme,
  AnalyticsTotals,
} from "./analyticsApi.ts";

export type AnalyticsRange = {
  /** The provider (payee), any letter case. */
  provider: string;
  /** Inclusive start. */
  from: Date;
  /** Exclusive end. */
  to: Date;
  /** Only charges in this token. */
  token?: string | undefined;
};

/** Breakdown of one bucket; `start` is the bucket's first instant (UTC). */
export type AnalyticsBucketTotals = AnalyticsBreakdown & { start: Date };

const GroupRowSchema = z.object({
  bucket: TimestampColumnSchema.nullable(),
  by_scheme: z.number().int(),
  by_plan: z.number().int(),
  scheme: z.enum(["one-time", "subscription", "metered"]).nullable(),
  plan_id: z.string().nullable(),
  volume: BigintColumnSchema,
  count: SafeIntColumnSchema,
  payers: SafeIntColumnSchema,
});
type GroupRow = z.infer<typeof GroupRowSchema>;

/**
 * Every charge to the provider in [$2, $3): time, scheme, plan, payer, amount.
 *
 * One-time payments count only once settled on chain, which they reach only after every check of the
 * facilitator (minimum amount, memo terms and expiry, signature, balance, simulation): a stranger's
 * refused junk never has a row here. A settled zero-value row (one a facilitator before the minimum
 * could leave behind) moved no money and is not a charge.
 */
const CHARGES = `
  SELECT settled_at AS at, 'one-time' AS scheme, NULL::text AS plan_id, payer, amount::numeric AS amount
  FROM payments
  WHERE status = 'settled' AND pay_to = $1 AND settled_at >= $2 AND settled_at < $3 AND amount > 0
    AND ($4::text IS NULL OR token = $4)
  UNION ALL
  SELECT created_at,
    CASE type WHEN 'allowance.deducted' THEN 'metered' ELSE 'subscription' END,
    data ->> 'planId', lower(data ->> 'subscriber'), (data ->> 'amount')::numeric
  FROM events
  WHERE type IN ('subscription.created', 'subscription.renewed', 'allowance.deducted')
    AND undone_at IS NULL AND lower(data ->> 'provider') = $1 AND created_at >= $2 AND created_at < $3
    AND data ->> 'amount' ~ '^[0-9]{1,78}$'
    AND ($4::text IS NULL OR lower(data ->> 'token') = $4)`;

/**
 * Groups the charges (per bucket when `bucket` is given) three ways at once: all together, by scheme,
 * and by plan. `GROUPING(...)` tells the sets apart.
 */
function groupedSql(bucketed: boolean): string {
  const bucketExpr = bucketed ? "date_trunc($5, at, 'UTC')" : "NULL::timestamptz";
  const key = bucketed ? "bucket, " : "";
  return `
    SELECT ${bucketed ? "bucket" : "NULL::timestamptz AS bucket"}, GROUPING(scheme) AS by_scheme, GROUPING(plan_id) AS by_plan, scheme, plan_id,
      coalesce(sum(amount), 0) AS volume, count(*) AS count, count(DISTINCT payer) AS payers
    FROM (SELECT ${bucketExpr} AS bucket, scheme, plan_id, payer, amount FROM (${CHARGES}) charges) c
    GROUP BY GROUPING SETS ((${key.replace(/, $/, "")}), (${key}scheme), (${key}plan_id))
    ORDER BY bucket, scheme, plan_id`;
}

const zero = (): AnalyticsTotals => ({ volume: "0", count: 0, uniquePayers: 0 });

function emptyBreakdown(): AnalyticsBreakdown {
  return {
    ...zero(),
    schemes: { "one-time": zero(), subscription: zero(), metered: zero() },
    plans: [],
  };
}

function apply(breakdown: AnalyticsBreakdown, row: GroupRow): void {
  const totals: AnalyticsTotals = {
    volume: row.volume.toString(),
    count: row.count,
    uniquePayers: row.payers,
  };
  // GROUPING(x) = 1 when x was rolled up in this row's grouping set.
  if (row.by_scheme === 1 && row.by_plan === 1) {
    Object.assign(breakdown, totals);
  } else if (row.by_scheme === 0 && row.scheme !== null) {
    breakdown.schemes[row.scheme as AnalyticsScheme] = totals;
  } else if (row.by_plan === 0 && row.plan_id !== null) {
    // One-time payments have no plan; their (plan = NULL) group is left out of `plans`.
    breakdown.plans.push({ planId: row.plan_id, ...totals });
  }
}

/** Totals of the whole range. */
export async function queryAnalyticsSummary(
  db: Queryable,
  range: AnalyticsRange,
): Promise<AnalyticsBreakdown> {
  const rows = await queryParsed(db, GroupRowSchema, groupedSql(false), params(range));
  const breakdown = emptyBreakdown();
  for (const row of rows) apply(breakdown, row);
  sortPlans(breakdown);
  return breakdown;
}

/**
 * Totals per hour or day (UTC), one entry per bucket from the one holding `from` (counted whole) to
 * the one holding the last instant before `to`, empty buckets included.
 */
export async function queryAnalyticsVolume(
  db: Queryable,
  range: AnalyticsRange,
  bucket: AnalyticsBucket,
): Promise<AnalyticsBucketTotals[]> {
  // The first bucket is whole: charges before `from` in the same hour or day count.
  const aligned = { ...range, from: bucketStart(range.from, bucket) };
  const rows = await queryParsed(db, GroupRowSchema, groupedSql(true), [...params(aligned), bucket]);
  const buckets = new Map<number, AnalyticsBucketTotals>();
  for (const start of bucketStarts(aligned.from, aligned.to, bucket)) {
    buckets.set(start.getTime(), { start, ...emptyBreakdown() });
  }
  for (const row of rows) {
    if (row.bucket === null) continue;
    const entry = buckets.get(row.bucket.getTime());
    if (entry !== undefined) apply(entry, row);
  }
  const result = [...buckets.values()];
  for (const entry of result) sortPlans(entry);
  return result;
}

/** The UTC start of the hour or day holding `time`. */
export function bucketStart(time: Date, bucket: AnalyticsBucket): Date {
  const t = new Date(time.getTime());
  if (bucket === "day") t.setUTCHours(0, 0, 0, 0);
  else t.setUTCMinutes(0, 0, 0);
  return t;
}

/** Starts of the buckets covering [from, to). */
export function bucketStarts(from: Date, to: Date, bucket: AnalyticsBucket): Date[] {
  const step = bucket === "day" ? 86_400_000 : 3_600_000;
  const starts: Date[] = [];
  for (let t = bucketStart(from, bucket).getTime(); t < to.getTime(); t += step) starts.push(new Date(t));
  return starts;
}

function params(range: AnalyticsRange) {
  return [range.provider.toLowerCase(), range.from, range.to, range.token?.toLowerCase() ?? null];
}

function sortPlans(breakdown: AnalyticsBreakdown): void {
  // Plan ids are decimal strings: shorter is smaller, then digit by digit.
  breakdown.plans.sort((a, b) => a.planId.length - b.planId.length || (a.planId < b.planId ? -1 : 1));
}
