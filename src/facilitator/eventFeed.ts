/**
 * `GET /events?after=<cursor>&types=<a,b>&provider=<address>&limit=<n>`: a provider's events
 * (payments, plans, subscriptions, allowances) for pollers. Gates use it to drop cached subscription
 * statuses as soon as a subscription is paused, cancelled or goes PastDue, and to learn how their
 * metered usage settled (docs/subscriptions.md).
 *
 * Reading without skipping: event ids come from a sequence and are taken before commit, so on a
 * PostgreSQL server a lower id can become visible after a higher one was served. Like the webhook
 * outbox, the feed therefore serves only events of transactions older than every transaction still
 * running (`tx < pg_snapshot_xmin(pg_current_snapshot())`), a set that can no longer grow, in
 * (tx, id) order, and its cursor is that pair (migration 0020). An event becomes readable once its
 * transaction and every older one have finished.
 *
 * Per provider, with its key (docs/subscriptions.md): `Authorization: Bearer <provider API key>`, and the feed
 * holds only events naming that provider (`provider` or `payTo`). Most of the log is public on chain,
 * but a payment's memo is not: it names the method and path a payer bought, and together with the
 * signed authorization (public once settled) it is all `POST /authorize` needs to hand out the
 * payment's proof again. So no one but the payee reads a memo here. `provider=` may be given for
 * clarity; naming another provider than the key's is refused.
 */
import type { Hono } from "hono";
import { z } from "zod";
import { routeDoc } from "../http/routeDocs.ts";
import { AddressSchema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { parseWire } from "../protocol/parseWire.ts";
import {
  type EventCursor,
  EventCursorSchema,
  type EventFeedResponse,
  EventFeedResponseSchema,
} from "../protocol/subscriptions.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryParsed } from "../store/queryParsed.ts";
import type { FacilitatorContext } from "./facilitatorContext.ts";
import type { FacilitatorModule } from "./facilitatorModule.ts";
import { requireProvider } from "./providers/requireProvider.ts";

const QuerySchema = z.object({
  /** Omitted: from the start of the log. */
  after: EventCursorSchema.optional(),
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
  tx: z.string().regex(/^(0|[1-9][0-9]*)$/),
  type: z.string(),
  data: z.record(z.string(), z.unknown()),
  created_at: TimestampColumnSchema,
});

const START: EventCursor = "0.0";

const feedDoc = routeDoc({
  summary:
    "The events naming the key's provider (payments, plans, subscriptions, allowances) after a cursor, in commit order",
  query: QuerySchema,
  response: EventFeedResponseSchema,
  errors: [400],
});

/** The event feed as a facilitator module. */
export const eventFeedModule = (ctx: Pick<FacilitatorContext, "store">): FacilitatorModule => ({
  name: "event-feed",
  routes(app: Hono) {
    app.get("/events", feedDoc, requireProvider(ctx), async (c) => {
      const provider = c.get("provider").address;
      const query = parseWire(QuerySchema, c.req.query(), { what: "query" });
      if (query.provider !== undefined && query.provider !== provider) {
        throw new TollgateError("Unauthorized", "this API key reads its own provider's events only", {
          details: { provider },
        });
      }
      const after = query.after ?? START;
      const [afterTx, afterId] = after.split(".");
      const params: unknown[] = [afterTx, afterId, query.limit];
      // Only finished transactions older than every running one (see the top of this file).
      let where = "(tx, id) > ($1::xid8, $2::bigint) AND tx < pg_snapshot_xmin(pg_current_snapshot())";
      if (query.types !== undefined && query.types.length > 0) {
        params.push(query.types);
        where += ` AND type = ANY($${params.length}::text[])`;
      }
      params.push(provider.toLowerCase());
      where += ` AND (lower(data ->> 'provider') = $${params.length} OR lower(data ->> 'payTo') = $${params.length})`;
      const rows = await queryParsed(
        ctx.store,
        EventRowSchema,
        // `events.tx`, not `tx`: a bare name in ORDER BY is the output column, here the text of the
        // transaction id, and text puts 1000 before 999 (a page would end past events not yet served).
        `SELECT id, tx::text AS tx, type, data, created_at FROM events WHERE ${where} ORDER BY events.tx, events.id LIMIT $3`,
        params as never,
      );
      const last = rows.at(-1);
      const body: EventFeedResponse = {
        events: rows.map((row) => ({
          id: row.id,
          type: row.type,
          created: Math.floor(row.created_at.getTime() / 1000),
          data: row.data,
        })),
        next: last === undefined ? after : `${last.tx}.${last.id}`,
      };
      return c.json(body);
    });
  },
});
