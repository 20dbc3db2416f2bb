/**
 * Query and reply bodies of `GET /analytics/volume` and `GET /analytics/summary` (docs/analytics.md),
 * shared by the routes and by `tollgate analytics`. Amounts are decimal strings in the token's
 * smallest unit; times are ISO 8601 in UTC.
 */
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { AtomicAmountSchema } from "../../protocol/amount.ts";

export const AnalyticsSchemeSchema = z.enum(["one-time", "subscription", "metered"]);
export type AnalyticsScheme = z.infer<typeof AnalyticsSchemeSchema>;

export const AnalyticsBucketSchema = z.enum(["hour", "day"]);
export type AnalyticsBucket = z.infer<typeof AnalyticsBucketSchema>;

/** A time in a query: ISO 8601 (`2026-11-22`, `2026-11-22T10:00:00Z`) or Unix seconds. */
export const AnalyticsTimeSchema = z.union([
  z
    .string()
    .regex(/^[0-9]{1,11}$/)
    .transform((s) => new Date(Number(s) * 1000)),
  z.iso.date().transform((s) => new Date(`${s}T00:00:00Z`)),
  z.iso.datetime({ offset: true }).transform((s) => new Date(s)),
]);

const commonQuery = {
  from: AnalyticsTimeSchema.optional(),
  to: AnalyticsTimeSchema.optional(),
  /** Only charges in this token (default: every token of the facilitator). */
  token: AddressSchema.optional(),
};

export const AnalyticsVolumeQuerySchema = z.object({
  bucket: AnalyticsBucketSchema.default("day"),
  ...commonQuery,
});
export type AnalyticsVolumeQuery = z.infer<typeof AnalyticsVolumeQuerySchema>;

export const AnalyticsSummaryQuerySchema = z.object(commonQuery);
export type AnalyticsSummaryQuery = z.infer<typeof AnalyticsSummaryQuerySchema>;

/** Volume (sum of amounts), number of charges and distinct payers of one group of charges. */
export const AnalyticsTotalsSchema = z.object({
  volume: AtomicAmountSchema,
  count: z.int().nonnegative(),
  uniquePayers: z.int().nonnegative(),
});
export type AnalyticsTotals = z.infer<typeof AnalyticsTotalsSchema>;

export const AnalyticsPlanTotalsSchema = AnalyticsTotalsSchema.extend({ planId: z.string() });
export type AnalyticsPlanTotals = z.infer<typeof AnalyticsPlanTotalsSchema>;

/** Totals of a time range: overall, per scheme (all three, zeros included) and per plan that had charges. */
export const AnalyticsBreakdownSchema = AnalyticsTotalsSchema.extend({
  schemes: z.object({
    "one-time": AnalyticsTotalsSchema,
    subscription: AnalyticsTotalsSchema,
    metered: AnalyticsTotalsSchema,
  }),
  plans: z.array(AnalyticsPlanTotalsSchema),
});
export type AnalyticsBreakdown = z.infer<typeof AnalyticsBreakdownSchema>;

export const AnalyticsVolumeResponseSchema = z.object({
  provider: AddressSchema,
  bucket: AnalyticsBucketSchema,
  /** The range, `[from, to)`; `from` is moved back to the start of its bucket. */
  from: z.iso.datetime(),
  to: z.iso.datetime(),
  /** Every bucket of the range in time order, empty ones included. */
  buckets: z.array(AnalyticsBreakdownSchema.extend({ start: z.iso.datetime() })),
});
export type AnalyticsVolumeResponse = z.infer<typeof AnalyticsVolumeResponseSchema>;

export const AnalyticsSummaryResponseSchema = AnalyticsBreakdownSchema.extend({
  provider: AddressSchema,
  from: z.iso.datetime(),
  to: z.iso.datetime(),
});
export type AnalyticsSummaryResponse = z.infer<typeof AnalyticsSummaryResponseSchema>;
