/**
 * `GET /events?after=<id>&types=<a,b>&provider=<address>&limit=<n>`: the facilitator's event log
 * (payments, plans, subscriptions, allowances) for pollers. Gates use it to drop cached subscription
 * statuses as soon as a subscription is paused, cancelled or goes PastDue (docs/subscriptions.md).
 *
 * Everything in the log is already public on chain (the memos of payments aside, which name the
 * method, path and price a gate quoted), so the feed needs no key.
 */
import type { Hono } from "hono";
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { EventFeedResponse } from "../../protocol/subscriptions.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";

const QuerySchema = z.object({
  after: z
    .string()
    .regex(/^(0|[1-9][0-9]{0,15})$/)
    .transform(Number)
    .default(0),
  types: z
    .string()
    .max(1000)
    .transform((text) => text.split(",").filter((t) => t !== ""))
    .pipe(z.array(z.string().regex(/^[a-z_]+\.[a-z_]+$/)).max(20))
    .optional(),
  provider: AddressSchema.optional(),
  limit: z
    .string()
    .regex(/^[1-9][0-9]{0,3}$/)
    .transform(Number)
    .pipe(z.int().max(1000))
    .default(100),
});

const EventRowSchema = z.object({
  id: SafeIntColumnSchema,
  type: z.string(),
  data: z.record(z.string(), z.unknown()),
  created_at: TimestampColumnSchema,
});

/** The event feed as a facilitator module. */
export const eventFeedModule: FacilitatorModuleFactory = (ctx) => ({
  name: "event-feed",
  routes(app: Hono) {
    app.get("/events", async (c) => {
      const query = parseWire(QuerySchema, c.req.query(), { what: "query" });
      const params: unknown[] = [query.after, query.limit];
      let where = "id > $1";
      if (query.types !== undefined && query.types.length > 0) {
        params.push(query.types);
        where += ` AND type = ANY($${params.length}::text[])`;
      }
      if (query.provider !== undefined) {
        params.push(query.provider.toLowerCase());
        where += ` AND (lower(data ->> 'provider') = $${params.length} OR lower(data ->> 'payTo') = $${params.length})`;
      }
      const rows = await queryParsed(
        ctx.store,
        EventRowSchema,
        `SELECT id, type, data, created_at FROM events WHERE ${where} ORDER BY id LIMIT $2`,
        params as never,
      );
      const body: EventFeedResponse = {
        events: rows.map((row) => ({
          id: row.id,
          type: row.type,
          created: Math.floor(row.created_at.getTime() / 1000),
          data: row.data,
        })),
        next: rows.at(-1)?.id ?? query.after,
      };
      return c.json(body);
    });
  },
});
