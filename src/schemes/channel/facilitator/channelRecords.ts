/**
 * The `channels` table (migration 0092): the facilitator's cache of each channel's chain state, the
 * latest voucher its payee's gate handed over, and the claim in flight. Every write that moves money
 * (a claim) goes through the outbox in the same transaction as the row that records it.
 */
import type { Address, Hex } from "viem";
import { z } from "zod";
import {
  BigintColumnSchema,
  SafeIntColumnSchema,
  TimestampColumnSchema,
} from "../../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";

/** Built once: a zod object schema compiles its parser on first use. */
const ClaimableSummaryRowSchema = z.object({
  value: BigintColumnSchema.nullable(),
  count: SafeIntColumnSchema,
  oldest: TimestampColumnSchema.nullable(),
  closing: SafeIntColumnSchema,
});

const HexColumn = z.string().regex(/^0x[0-9a-f]*$/);
const AddressColumn = z.string().regex(/^0x[0-9a-f]{40}$/);

export const ChannelRowSchema = z.object({
  channel_id: HexColumn,
  chain_id: SafeIntColumnSchema,
  contract: AddressColumn,
  payer: AddressColumn,
  payee: AddressColumn,
  token: AddressColumn,
  deposit: BigintColumnSchema,
  claimed: BigintColumnSchema,
  session_key_x: HexColumn,
  session_key_y: HexColumn,
  close_delay: SafeIntColumnSchema,
  close_requested_at: SafeIntColumnSchema,
  closed: z.boolean(),
  open_nonce: HexColumn.nullable(),
  open_tx: HexColumn.nullable(),
  voucher_amount: BigintColumnSchema,
  voucher_signature: HexColumn.nullable(),
  unclaimed_since: TimestampColumnSchema.nullable(),
  claim_outbox_id: BigintColumnSchema.nullable(),
  claim_amount: BigintColumnSchema.nullable(),
  claim_error: z.string().nullable(),
  close_wanted: z.boolean(),
  /** The highest cumulative amount a `channel.claimed` event announced (channelClaimReorg.ts). */
  announced_claimed: BigintColumnSchema,
  /** A `channel.closed` event announced the close (channelClaimReorg.ts). */
  close_announced: z.boolean(),
});
export type ChannelRow = z.infer<typeof ChannelRowSchema>;

/** A channel's chain state, as `readChannel` returns it, keyed by id. */
export type ChainChannel = {
  channelId: Hex;
  chainId: number;
  contract: Address;
  payer: Address;
  payee: Address;
  token: Address;
  deposit: bigint;
  claimed: bigint;
  sessionKeyX: Hex;
  sessionKeyY: Hex;
  closeDelay: number;
  closeRequestedAt: number;
  closed: boolean;
  /** The salt's first 8 bytes (`TollgateChannels.Channel.tag`); known when read from the chain. */
  tag?: Hex | undefined;
};

const lower = (text: string) => text.toLowerCase();

export function findChannel(db: Queryable, channelId: Hex): Promise<ChannelRow | undefined> {
  return queryOneParsed(db, ChannelRowSchema, "SELECT * FROM channels WHERE channel_id = $1", [
    lower(channelId),
  ]);
}

export function findChannelByOpenNonce(db: Queryable, nonce: Hex): Promise<ChannelRow | undefined> {
  return queryOneParsed(db, ChannelRowSchema, "SELECT * FROM channels WHERE open_nonce = $1", [lower(nonce)]);
}

/**
 * Records a channel read from the chain, or refreshes the chain columns of a known one. `claimed` and
 * `deposit` only move forward here: a stale read never undoes a newer one. The open nonce and
 * transaction are written only by `recordOpenTransaction`: `open_nonce` is the table's second unique
 * key, and an insert carrying it could meet a concurrent one there, past `ON CONFLICT (channel_id)`.
 */
export async function upsertChannel(db: Queryable, c: ChainChannel): Promise<ChannelRow> {
  const rows = await queryParsed(
    db,
    ChannelRowSchema,
    `INSERT INTO channels (channel_id, chain_id, contract, payer, payee, token, deposit, claimed,
       session_key_x, session_key_y, close_delay, close_requested_at, closed)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
     ON CONFLICT (channel_id) DO UPDATE SET
       deposit = GREATEST(channels.deposit, EXCLUDED.deposit),
       claimed = GREATEST(channels.claimed, EXCLUDED.claimed),
       close_requested_at = GREATEST(channels.close_requested_at, EXCLUDED.close_requested_at),
       closed = channels.closed OR EXCLUDED.closed,
       updated_at = now()
     RETURNING *`,
    [
      lower(c.channelId),
      c.chainId,
      lower(c.contract),
      lower(c.payer),
      lower(c.payee),
      lower(c.token),
      c.deposit,
      c.claimed,
      lower(c.sessionKeyX),
      lower(c.sessionKeyY),
      c.closeDelay,
      c.closeRequestedAt,
      c.closed,
    ],
  );
  return rows[0]!;
}

/**
 * Records the transaction that opened a channel. `true` only for the call that recorded it, so
 * `channel.opened` is written once even when instances race on the same open. `nonce` (the open
 * authorization's) is `null` when the channel was learnt from its log; a later retry of the open finds
 * the channel by the chain's word then.
 */
export async function recordOpenTransaction(
  db: Queryable,
  channelId: Hex,
  nonce: Hex | null,
  tx: Hex,
): Promise<boolean> {
  const rows = await db.query(
    `UPDATE channels SET open_nonce = COALESCE(open_nonce, $2), open_tx = $3, updated_at = now()
     WHERE channel_id = $1 AND open_tx IS NULL
     RETURNING channel_id`,
    [lower(channelId), nonce === null ? null : lower(nonce), lower(tx)],
  );
  return rows.length > 0;
}

/**
 * Keeps `amount` as the channel's voucher if it is above the one held (the only way voucher_amount
 * changes). `true` when stored. A new voucher clears a permanent claim error of an older one. Once the
 * payee asked for a cooperative close (`close_wanted`) the held voucher is frozen: the close carries it,
 * so the facilitator never closes with less than it holds.
 */
export async function storeVoucher(
  db: Queryable,
  channelId: Hex,
  amount: bigint,
  signature: Hex,
  now: Date,
): Promise<boolean> {
  const rows = await db.query(
    `UPDATE channels SET voucher_amount = $2, voucher_signature = $3, claim_error = NULL,
       unclaimed_since = COALESCE(unclaimed_since, $4), updated_at = now()
     WHERE channel_id = $1 AND voucher_amount < $2 AND NOT closed AND NOT close_wanted
     RETURNING channel_id`,
    [lower(channelId), amount, lower(signature), now],
  );
  return rows.length > 0;
}

/** What the claim worker may claim now: vouchers above what was claimed, none in flight, oldest first. */
export function claimableChannels(db: Queryable, contract: Address, limit: number): Promise<ChannelRow[]> {
  return queryParsed(
    db,
    ChannelRowSchema,
    `SELECT * FROM channels
     WHERE contract = $1 AND NOT closed AND NOT close_wanted AND claim_outbox_id IS NULL AND claim_error IS NULL
       AND voucher_amount > claimed AND voucher_signature IS NOT NULL
     ORDER BY close_requested_at > 0 DESC, unclaimed_since ASC NULLS LAST
     LIMIT $2
     FOR UPDATE SKIP LOCKED`,
    [lower(contract), limit],
  );
}

/** Sum and age of what is claimable, to decide whether a batch is worth its gas. */
export async function claimableSummary(
  db: Queryable,
  contract: Address,
): Promise<{ value: bigint; count: number; oldest: Date | null; closing: number }> {
  const row = await queryOneParsed(
    db,
    ClaimableSummaryRowSchema,
    `SELECT sum(voucher_amount - claimed) AS value, count(*)::int AS count, min(unclaimed_since) AS oldest,
       count(*) FILTER (WHERE close_requested_at > 0)::int AS closing
     FROM channels
     WHERE contract = $1 AND NOT closed AND NOT close_wanted AND claim_outbox_id IS NULL AND claim_error IS NULL
       AND voucher_amount > claimed AND voucher_signature IS NOT NULL`,
    [lower(contract)],
  );
  return {
    value: row?.value ?? 0n,
    count: row?.count ?? 0,
    oldest: row?.oldest ?? null,
    closing: row?.closing ?? 0,
  };
}

/** Marks channels as claimed by outbox row `outboxId` up to each one's voucher amount. */
export async function markClaimInFlight(
  db: Queryable,
  outboxId: number,
  channelIds: readonly Hex[],
): Promise<void> {
  await db.query(
    `UPDATE channels SET claim_outbox_id = $1, claim_amount = voucher_amount, updated_at = now()
     WHERE channel_id = ANY($2::text[])`,
    [outboxId, channelIds.map(lower)],
  );
}

/** The channels a claim row covers. */
export function channelsOfClaim(db: Queryable, outboxId: number): Promise<ChannelRow[]> {
  return queryParsed(db, ChannelRowSchema, "SELECT * FROM channels WHERE claim_outbox_id = $1", [outboxId]);
}

/**
 * Ends a channel's claim: `claimed` becomes at least `claimed`, the in-flight mark is cleared, and
 * `unclaimed_since` restarts when a newer voucher is still unclaimed.
 */
export async function finishClaim(
  db: Queryable,
  channelId: Hex,
  outcome: { claimed: bigint; closed?: boolean; error?: string | null },
  now: Date,
): Promise<void> {
  await db.query(
    `UPDATE channels SET claimed = GREATEST(claimed, $2), closed = closed OR $3,
       claim_error = CASE WHEN $4::text IS NULL THEN claim_error ELSE $4 END,
       claim_outbox_id = NULL, claim_amount = NULL,
       unclaimed_since = CASE WHEN voucher_amount > GREATEST(claimed, $2) THEN $5::timestamptz ELSE NULL END,
       updated_at = now()
     WHERE channel_id = $1`,
    [lower(channelId), outcome.claimed, outcome.closed ?? false, outcome.error ?? null, now],
  );
}

/** Raises a channel's cached `claimed` to what a receipt proved, leaving any claim in flight as it is. */
export async function raiseClaimed(db: Queryable, channelId: Hex, claimed: bigint): Promise<void> {
  await db.query(
    "UPDATE channels SET claimed = GREATEST(claimed, $2), updated_at = now() WHERE channel_id = $1",
    [lower(channelId), claimed],
  );
}

/**
 * Marks a channel closed (cooperative close or withdrawal) with the final claimed amount. `true` only
 * for the call that closed it first, so an event about it is recorded once even when instances race
 * or a reorganisation undid the close and it was recorded again.
 */
export async function markClosed(db: Queryable, channelId: Hex, claimed: bigint): Promise<boolean> {
  // The old mark, read under the row lock the UPDATE takes: a close a reorganisation undid and that was
  // sent again closes the row a second time but is not announced again (channelClaimReorg.ts).
  const rows = await db.query<{ first: boolean }>(
    `WITH prev AS (SELECT close_announced FROM channels WHERE channel_id = $1 AND NOT closed FOR UPDATE)
     UPDATE channels c SET closed = true, close_announced = true, claimed = GREATEST(c.claimed, $2),
       close_wanted = false, unclaimed_since = NULL, claim_outbox_id = NULL, claim_amount = NULL,
       updated_at = now()
     FROM prev WHERE c.channel_id = $1 AND NOT c.closed
     RETURNING NOT prev.close_announced AS first`,
    [lower(channelId), claimed],
  );
  return rows[0]?.first === true;
}

/** Records the payer's close request time (read from the chain). */
export async function markCloseRequested(db: Queryable, channelId: Hex, at: number): Promise<void> {
  await db.query(
    `UPDATE channels SET close_requested_at = GREATEST(close_requested_at, $2), updated_at = now()
     WHERE channel_id = $1`,
    [lower(channelId), at],
  );
}

/** The payee asked for a cooperative close; the claim worker does it once no claim is in flight. */
export async function markCloseWanted(db: Queryable, channelId: Hex): Promise<void> {
  await db.query("UPDATE channels SET close_wanted = true, updated_at = now() WHERE channel_id = $1", [
    lower(channelId),
  ]);
}

/** Open channels holding a voucher whose close request is not known yet (to watch the chain for one). */
export function watchedChannels(db: Queryable, contract: Address, limit: number): Promise<ChannelRow[]> {
  return queryParsed(
    db,
    ChannelRowSchema,
    `SELECT * FROM channels WHERE contract = $1 AND NOT closed AND close_requested_at = 0 AND voucher_amount > 0
     ORDER BY updated_at ASC LIMIT $2`,
    [lower(contract), limit],
  );
}

/** Channels whose payee asked for a cooperative close and that have no transaction in flight. */
export function closableChannels(db: Queryable, contract: Address, limit: number): Promise<ChannelRow[]> {
  return queryParsed(
    db,
    ChannelRowSchema,
    `SELECT * FROM channels
     WHERE contract = $1 AND close_wanted AND NOT closed AND claim_outbox_id IS NULL
     ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
    [lower(contract), limit],
  );
}

/** A cooperative close that failed for good: stop retrying it and say why. */
export async function abandonClose(db: Queryable, channelId: Hex, reason: string): Promise<void> {
  await db.query(
    `UPDATE channels SET close_wanted = false, claim_outbox_id = NULL, claim_amount = NULL, claim_error = $2,
       updated_at = now() WHERE channel_id = $1`,
    [lower(channelId), reason],
  );
}
