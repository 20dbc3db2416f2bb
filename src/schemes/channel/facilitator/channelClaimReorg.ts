/**
 * Channel claims a chain reorganisation undid (docs/channels.md, "Claims undone by a reorganisation").
 * The outbox watches confirmed `channel-claim` rows and, when one's transaction left the canonical chain,
 * moves the row back to `broadcast` and calls `reopenChannelClaim` in that same store transaction; then
 * it broadcasts the claim's recorded bytes again and the claim worker's handler records the new outcome
 * as a first one.
 *
 * Invariants:
 * 1. What a claim's outcome recorded per channel is kept beside it (`channel_claim_items`, written in the
 *    outcome's transaction): the channel's `claimed` before the claim and the cumulative amount it paid
 *    up to. The reopen needs nothing else, so it makes no RPC call.
 * 2. The reopen is one store transaction, run only by the instance whose compare-and-set moved the outbox
 *    row out of `confirmed`: two instances reopen a claim once, and a crash before the commit leaves
 *    the claim confirmed for the next check to find. In it each channel the claim paid gets its cached
 *    `claimed` lowered to what it was before the claim (never raised: a cache below the chain only
 *    costs a claim that pays nothing, one above it would leave the payee unpaid) and the claim marked in
 *    flight again, unless another claim of the channel is in flight (that claim's outcome then records
 *    what the chain holds). A channel in flight is skipped by the claim rounds, so no second claim of
 *    the voucher is built while the old one can still be mined.
 * 3. Money: the re-sent claim is the same call at the same nonce, and the contract pays
 *    `cumulative − claimed`, so no path pays a voucher twice.
 * 4. A cooperative close (kind `channel-close`) is reopened the same way: the channel open again at what
 *    it held before the close, the close in flight again; `channels.close_announced` keeps its
 *    `channel.closed` event to one (`markClosed`).
 * 5. Announced once: `channels.announced_claimed` is the highest cumulative amount a `channel.claimed`
 *    event announced. A claim announces only what it adds beyond that (`announcedAmount`), so the events
 *    of a channel add up to what the chain says was claimed however often a claim is undone and sent
 *    again; the reopen leaves the mark as it is.
 */
import type { Hex } from "viem";
import { z } from "zod";
import { BigintColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";

const lower = (text: string) => text.toLowerCase();

/** Records what claim `outboxId` paid on `channelId`, in the transaction recording its outcome. */
export async function recordClaimItem(
  db: Queryable,
  outboxId: number,
  channelId: Hex,
  item: { claimedBefore: bigint; cumulativeAmount: bigint },
): Promise<void> {
  await db.query(
    `INSERT INTO channel_claim_items (outbox_id, channel_id, claimed_before, cumulative_amount)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (outbox_id, channel_id) DO UPDATE SET
       claimed_before = EXCLUDED.claimed_before, cumulative_amount = EXCLUDED.cumulative_amount`,
    [outboxId, lower(channelId), item.claimedBefore, item.cumulativeAmount],
  );
}

const AnnouncedRowSchema = z.object({ before: BigintColumnSchema });

/**
 * Moves the channel's announced mark up to `cumulativeAmount` and returns what a `channel.claimed` event
 * should announce for this claim: what it paid (`cumulativeAmount − claimedBefore`) less any part an
 * earlier event already announced (a claim sent again after a reorganisation). `0n`: announce nothing.
 */
export async function announcedAmount(
  db: Queryable,
  channelId: Hex,
  item: { claimedBefore: bigint; cumulativeAmount: bigint },
): Promise<bigint> {
  // The old mark, read under the row lock the UPDATE takes (RETURNING only sees the new one).
  const row = await queryOneParsed(
    db,
    AnnouncedRowSchema,
    `WITH prev AS (SELECT announced_claimed FROM channels WHERE channel_id = $1 FOR UPDATE)
     UPDATE channels c SET announced_claimed = GREATEST(c.announced_claimed, $2)
     FROM prev WHERE c.channel_id = $1
     RETURNING prev.announced_claimed AS before`,
    [lower(channelId), item.cumulativeAmount],
  );
  const floor = row === undefined || row.before < item.claimedBefore ? item.claimedBefore : row.before;
  return item.cumulativeAmount > floor ? item.cumulativeAmount - floor : 0n;
}

/**
 * The claim side of reopening claim `outboxId` (invariant 2); runs in the store transaction that moved
 * its outbox row back to `broadcast`. Returns the channels lowered.
 */
export async function reopenChannelClaim(db: Queryable, outboxId: number): Promise<string[]> {
  const rows = await db.query<{ channel_id: string }>(
    `UPDATE channels c SET claimed = LEAST(c.claimed, i.claimed_before),
       claim_outbox_id = COALESCE(c.claim_outbox_id, i.outbox_id),
       claim_amount = CASE WHEN c.claim_outbox_id IS NULL THEN i.cumulative_amount ELSE c.claim_amount END,
       updated_at = now()
     FROM channel_claim_items i
     WHERE i.outbox_id = $1 AND c.channel_id = i.channel_id
     RETURNING c.channel_id`,
    [outboxId],
  );
  await db.query("DELETE FROM channel_claim_items WHERE outbox_id = $1", [outboxId]);
  return rows.map((r) => r.channel_id);
}

/**
 * The channel side of reopening cooperative close `outboxId` (kind `channel-close`) a reorganisation
 * undid; runs in the store transaction that moved its outbox row back to `broadcast`. The channel is
 * open again in the store, its `claimed` back to what it was before the close, and the close in flight
 * again (`close_wanted`, `claim_outbox_id`): vouchers stay frozen, no claim or second close is built,
 * and the close's new outcome is recorded as a first one. `close_announced` stays set, so that outcome
 * announces no second `channel.closed`. Returns the channels reopened.
 */
export async function reopenChannelClose(db: Queryable, outboxId: number): Promise<string[]> {
  const rows = await db.query<{ channel_id: string }>(
    `UPDATE channels c SET closed = false, close_wanted = true, claimed = LEAST(c.claimed, i.claimed_before),
       claim_outbox_id = i.outbox_id, claim_amount = NULL, updated_at = now()
     FROM channel_claim_items i
     WHERE i.outbox_id = $1 AND c.channel_id = i.channel_id AND c.closed
     RETURNING c.channel_id`,
    [outboxId],
  );
  await db.query("DELETE FROM channel_claim_items WHERE outbox_id = $1", [outboxId]);
  return rows.map((r) => r.channel_id);
}
