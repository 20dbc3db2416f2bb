/**
 * The facilitator's analytics module (docs/analytics.md): a provider's volume, charge count and unique
 * payers, by scheme and plan, over time. Provider-authenticated: each provider sees its own revenue.
 *
 * - `GET /analytics/volume?bucket=hour|day&from&to&token` → one entry per hour or day (UTC) of the range,
 *   empty ones included. Defaults: `bucket=day`, `to` = now, `from` = 30 days (day) or 24 hours (hour)
 *   before `to`.
 * - `GET /analytics/summary?from&to&token` → totals of the range (default: all time up to now).
 */
import type { Hono } from "hono";
import { getAddress } from "viem";
import { routeDoc } from "../../http/routeDocs.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { requireProvider } from "../providers/requireProvider.ts";
import {
  AnalyticsSummaryQuerySchema,
  type AnalyticsSummaryResponse,
  AnalyticsSummaryResponseSchema,
  AnalyticsVolumeQuerySchema,
  type AnalyticsVolumeResponse,
  AnalyticsVolumeResponseSchema,
} from "./analyticsApi.ts";
import { bucketStart, queryAnalyticsSummary, queryAnalyticsVolume } from "./queryAnalytics.ts";

export type AnalyticsModuleOptions = {
  /** Largest number of buckets one volume request may ask for (default 2 000: 83 days of hours). */
  maxBuckets?: number | undefined;
};

/** The analytics routes, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  volume: routeDoc({
    summary: "The provider's totals per hour or day over a range, by scheme and by plan",
    query: AnalyticsVolumeQuerySchema,
    response: AnalyticsVolumeResponseSchema,
    errors: [400],
  }),
  summary: routeDoc({
    summary: "The provider's totals over a range, by scheme and by plan",
    query: AnalyticsSummaryQuerySchema,
    response: AnalyticsSummaryResponseSchema,
    errors: [400],
  }),
};

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** A factory for the analytics module with explicit options. */
export function createAnalyticsModule(options: AnalyticsModuleOptions = {}): FacilitatorModuleFactory {
  const maxBuckets = options.maxBuckets ?? 2_000;
  if (!Number.isSafeInteger(maxBuckets) || maxBuckets < 1)
    throw new TypeError("maxBuckets must be a positive integer");

  return (ctx) => ({
    name: "analytics",
    routes(app: Hono) {
      const auth = requireProvider(ctx);

      app.get("/analytics/volume", docs.volume, auth, async (c) => {
        const query = parseWire(AnalyticsVolumeQuerySchema, c.req.query(), { what: "query" });
        const provider = c.get("provider").address;
        const step = query.bucket === "hour" ? HOUR_MS : DAY_MS;
        const to = query.to ?? new Date(ctx.clock.now());
        const from = query.from ?? new Date(to.getTime() - (query.bucket === "hour" ? 24 : 30) * step);
        checkRange(from, to);
        const aligned = bucketStart(from, query.bucket);
        const count = Math.ceil((to.getTime() - aligned.getTime()) / step);
        if (count > maxBuckets) {
          throw new TollgateError(
            "InvalidRequest",
            `the range holds ${count} ${query.bucket}s; ask for at most ${maxBuckets} (narrow the range or use bucket=day)`,
            { details: { reason: "too_many_buckets", buckets: count, maxBuckets } },
          );
        }
        const buckets = await queryAnalyticsVolume(
          ctx.store,
          { provider, from, to, token: query.token },
          query.bucket,
        );
        const body: AnalyticsVolumeResponse = {
          provider: getAddress(provider),
          bucket: query.bucket,
          from: aligned.toISOString(),
          to: to.toISOString(),
          buckets: buckets.map(({ start, ...totals }) => ({ start: start.toISOString(), ...totals })),
        };
        return c.json(body);
      });

      app.get("/analytics/summary", docs.summary, auth, async (c) => {
        const query = parseWire(AnalyticsSummaryQuerySchema, c.req.query(), { what: "query" });
        const provider = c.get("provider").address;
        const to = query.to ?? new Date(ctx.clock.now());
        const from = query.from ?? new Date(0);
        checkRange(from, to);
        const totals = await queryAnalyticsSummary(ctx.store, { provider, from, to, token: query.token });
        const body: AnalyticsSummaryResponse = {
          provider: getAddress(provider),
          from: from.toISOString(),
          to: to.toISOString(),
          ...totals,
        };
        return c.json(body);
      });
    },
  });
}

/** The analytics module with its defaults (listed in modules.ts). */
export const analyticsModule: FacilitatorModuleFactory = createAnalyticsModule();

function checkRange(from: Date, to: Date): void {
  if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime())) {
    throw new TollgateError("InvalidRequest", "from and to must be valid times");
  }
  if (from.getTime() >= to.getTime()) {
    throw new TollgateError("InvalidRequest", "from must be before to", {
      details: { from: from.toISOString(), to: to.toISOString() },
    });
  }
}
