/**
 * The event log as the index writes it: a log's event recorded (or an undone one revived), and the
 * `event.undone` / `event.restored` notices a reorganisation sends its provider.
 */
import type { Queryable } from "../../../store/store.ts";
import type { IndexerContext } from "./indexerDeps.ts";

export type UndoableEvent = { id: string | number; type: string; data: Record<string, unknown> };

/**
 * Records the event of a log; or, when a reorganisation undid the same event of the same transaction
 * (its renewal or deduction sent again and mined with the same outcome), revives that one instead, so
 * webhooks and analytics see it once.
 */
export async function recordLogEvent(
  ctx: Pick<IndexerContext, "recordEvent">,
  tx: Queryable,
  type: string,
  data: Record<string, unknown>,
): Promise<void> {
  const revived = await tx.query<UndoableEvent>(
    `UPDATE events SET undone_at = NULL WHERE id = (
       SELECT id FROM events WHERE type = $1 AND undone_at IS NOT NULL AND data ->> 'transaction' = $2
         AND coalesce(data ->> 'subscriptionId', '') = $3 AND coalesce(data ->> 'planId', '') = $4
         AND coalesce(data ->> 'ref', '') = $5
       ORDER BY id LIMIT 1) RETURNING id, type, data`,
    [
      type,
      String(data.transaction ?? ""),
      String(data.subscriptionId ?? ""),
      String(data.planId ?? ""),
      String(data.ref ?? ""),
    ],
  );
  if (revived.length === 0) await ctx.recordEvent(tx, type, data);
  for (const event of revived) await recordUndoing(ctx, tx, "event.restored", event);
}

/**
 * Tells the event's provider that a reorganisation undid it (`event.undone`), or that the same
 * transaction, mined again with the same outcome, restored it (`event.restored`): in the same store
 * transaction as the change, so a poller of `/events` or a webhook receiver that counted the event
 * can take it back, and count it again.
 */
export async function recordUndoing(
  ctx: Pick<IndexerContext, "recordEvent">,
  tx: Queryable,
  type: "event.undone" | "event.restored",
  event: UndoableEvent,
): Promise<void> {
  const { data } = event;
  await ctx.recordEvent(tx, type, {
    eventId: Number(event.id),
    eventType: event.type,
    transaction: data.transaction,
    ...(data.provider === undefined ? {} : { provider: data.provider }),
    ...(data.payTo === undefined ? {} : { payTo: data.payTo }),
    ...(data.subscriptionId === undefined ? {} : { subscriptionId: data.subscriptionId }),
    ...(data.planId === undefined ? {} : { planId: data.planId }),
  });
}
