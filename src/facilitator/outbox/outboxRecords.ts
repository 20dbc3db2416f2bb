/**
 * The outbox's rows (migration 0089), read through zod. Addresses, hashes and calldata are stored
 * lowercase. Every state change is a compare-and-set on `status`, so two workers (two instances, or a
 * restarted process and a slow one) can race on a row and exactly one of them wins each step.
 */
import type { Address, Hash, Hex } from "viem";
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { OutboxRequest, OutboxStatus } from "./outboxTypes.ts";

const HexText = z.string().regex(/^0x[0-9a-f]*$/) as z.ZodType<Hex>;
const AddressText = z.string().regex(/^0x[0-9a-f]{40}$/) as z.ZodType<Address>;
const HashText = z.string().regex(/^0x[0-9a-f]{64}$/) as z.ZodType<Hash>;

export const OutboxStatusSchema = z.enum([
  "queued",
  "signed",
  "broadcast",
  "confirmed",
  "reverted",
  "dropped",
]) satisfies z.ZodType<OutboxStatus>;

export const OutboxRowSchema = z.object({
  id: SafeIntColumnSchema,
  chain_id: SafeIntColumnSchema,
  sender: AddressText,
  kind: z.string(),
  owner: z.string(),
  meta: z.record(z.string(), z.unknown()).nullable(),
  to_address: AddressText,
  data: HexText,
  value: BigintColumnSchema,
  gas_limit: BigintColumnSchema,
  status: OutboxStatusSchema,
  nonce: SafeIntColumnSchema.nullable(),
  tx_hash: HashText.nullable(),
  raw_tx: HexText.nullable(),
  replaced_hashes: z.array(HashText),
  from_block: BigintColumnSchema.nullable(),
  block_number: BigintColumnSchema.nullable(),
  block_hash: HashText.nullable().optional(),
  failure: z.string().nullable(),
  created_at: TimestampColumnSchema,
  updated_at: TimestampColumnSchema,
});
export type OutboxRow = z.infer<typeof OutboxRowSchema>;

/** Inserts a queued row; returns its id. */
export async function insertOutboxRow(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  request: OutboxRequest,
): Promise<number> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO tx_outbox (chain_id, sender, kind, owner, meta, to_address, data, value, gas_limit)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
    requestValues(scope, request),
  );
  return Number(rows[0]!.id);
}

/** The nine values of a row's request, normalised as stored (the first nine of a signed row's too). */
function requestValues(scope: { chainId: number; sender: Address }, request: OutboxRequest) {
  return [
    scope.chainId,
    scope.sender.toLowerCase(),
    request.kind,
    request.owner,
    request.meta === undefined ? null : JSON.stringify(request.meta),
    request.to.toLowerCase(),
    request.data.toLowerCase(),
    request.value ?? 0n,
    request.gas,
  ];
}

/** Claims queued rows of the given kinds, oldest first, skipping rows another worker holds. */
export function claimQueuedRows(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  kinds: readonly string[],
  limit: number,
): Promise<OutboxRow[]> {
  return queryParsed(
    db,
    OutboxRowSchema,
    `SELECT * FROM tx_outbox WHERE status = 'queued' AND chain_id = $1 AND sender = $2 AND kind = ANY($3::text[])
     ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED`,
    [scope.chainId, scope.sender.toLowerCase(), [...kinds], limit],
  );
}

/** Whether any row of the given kinds waits to be signed. */
export async function hasQueuedRows(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  kinds: readonly string[],
): Promise<boolean> {
  const rows = await db.query(
    "SELECT 1 FROM tx_outbox WHERE status = 'queued' AND chain_id = $1 AND sender = $2 AND kind = ANY($3::text[]) LIMIT 1",
    [scope.chainId, scope.sender.toLowerCase(), [...kinds]],
  );
  return rows.length > 0;
}

/**
 * Locks the gas key's nonce row for the rest of the transaction and returns its next nonce (creating
 * the row at `floor` the first time). Held while signing, so instances never hand out one nonce twice.
 */
export async function lockNextNonce(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  floor: number,
): Promise<number> {
  // One statement: creates the row the first time, and locks it (an upsert takes the row lock) either way.
  const rows = await db.query<{ next_nonce: string }>(
    `INSERT INTO tx_senders (chain_id, sender, next_nonce) VALUES ($1, $2, $3)
     ON CONFLICT (chain_id, sender) DO UPDATE SET next_nonce = tx_senders.next_nonce
     RETURNING next_nonce`,
    [scope.chainId, scope.sender.toLowerCase(), floor],
  );
  return Number(rows[0]!.next_nonce);
}

export async function storeNextNonce(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  next: number,
): Promise<void> {
  await db.query(
    "UPDATE tx_senders SET next_nonce = $3, updated_at = now() WHERE chain_id = $1 AND sender = $2",
    [scope.chainId, scope.sender.toLowerCase(), next],
  );
}

/** Records a row's signed transaction (queued → signed); nothing has been broadcast yet. */
export async function markSigned(
  db: Queryable,
  id: number,
  signed: { nonce: number; hash: Hash; raw: Hex; fromBlock: bigint },
): Promise<void> {
  await db.query(
    `UPDATE tx_outbox SET status = 'signed', nonce = $2, tx_hash = $3, raw_tx = $4, from_block = $5,
       signed_at = now(), updated_at = now() WHERE id = $1 AND status = 'queued'`,
    [id, signed.nonce, signed.hash, signed.raw, signed.fromBlock],
  );
}

/** Inserts a row that is signed already (a nonce filler, or a transaction adopted from an older table). */
export async function insertSignedRow(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  row: OutboxRequest & { nonce: number; hash: Hash; raw: Hex; fromBlock: bigint | null },
): Promise<number> {
  return (await insertSigned(db, scope, row)).id;
}

/** Inserts a row already signed (status `signed`) and returns it as stored. */
export async function insertSigned(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  row: OutboxRequest & { nonce: number; hash: Hash; raw: Hex; fromBlock: bigint | null },
): Promise<OutboxRow> {
  const rows = await queryParsed(
    db,
    OutboxRowSchema,
    `INSERT INTO tx_outbox (chain_id, sender, kind, owner, meta, to_address, data, value, gas_limit, status,
       nonce, tx_hash, raw_tx, from_block, signed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'signed', $10, $11, $12, $13, now()) RETURNING *`,
    signedValues(scope, row),
  );
  return rows[0]!;
}

/** The thirteen values of a signed row's insert, normalised as stored. */
function signedValues(
  scope: { chainId: number; sender: Address },
  row: OutboxRequest & { nonce: number; hash: Hash; raw: Hex; fromBlock: bigint | null },
) {
  return [...requestValues(scope, row), row.nonce, row.hash, row.raw, row.fromBlock];
}

/**
 * `insertSigned` for a row whose nonce was taken from the gas key's `tx_senders` row, locked by this
 * transaction (`lockNextNonce`): the same statement stores the next nonce (this one's + 1), so a
 * signing transaction needs no statement of its own for it before its commit.
 */
export async function insertSignedTakingNonce(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  row: OutboxRequest & { nonce: number; hash: Hash; raw: Hex; fromBlock: bigint | null },
): Promise<OutboxRow> {
  const rows = await queryParsed(
    db,
    OutboxRowSchema,
    `WITH sender AS (
       UPDATE tx_senders SET next_nonce = $10::bigint + 1, updated_at = now()
       WHERE chain_id = $1 AND sender = $2
     )
     INSERT INTO tx_outbox (chain_id, sender, kind, owner, meta, to_address, data, value, gas_limit, status,
       nonce, tx_hash, raw_tx, from_block, signed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'signed', $10::bigint, $11, $12, $13, now()) RETURNING *`,
    signedValues(scope, row),
  );
  return rows[0]!;
}

/** signed → broadcast (a no-op in any other state). Refreshes `updated_at`, which reconcile reads as liveness. */
export async function markBroadcast(db: Queryable, id: number): Promise<void> {
  await db.query(
    `UPDATE tx_outbox SET status = 'broadcast', updated_at = now() WHERE id = $1 AND status IN ('signed', 'broadcast')`,
    [id],
  );
}

/**
 * Records a row's outcome if it is still open: exactly one caller gets `true` and must deliver the outcome
 * in the same transaction.
 */
export async function markFinal(
  db: Queryable,
  id: number,
  final: {
    status: "confirmed" | "reverted" | "dropped";
    hash: Hash | null;
    blockNumber: bigint | null;
    /** The receipt's block hash, kept for the reorganisation watch (confirmedRowWatch.ts). */
    blockHash?: Hash | null | undefined;
    failure: string | null;
  },
): Promise<boolean> {
  const rows = await db.query(
    `UPDATE tx_outbox SET status = $2, tx_hash = coalesce($3, tx_hash), block_number = $4, failure = $5,
       block_hash = $6, done_at = now(), updated_at = now()
     WHERE id = $1 AND status IN ('signed', 'broadcast') RETURNING id`,
    [id, final.status, final.hash, final.blockNumber, final.failure, final.blockHash?.toLowerCase() ?? null],
  );
  return rows.length === 1;
}

/** Records what the row's mined transaction cost the gas key (migration 0202; gasRunway.ts reads it). */
export async function recordFeePaid(db: Queryable, id: number, feePaid: bigint): Promise<void> {
  await db.query("UPDATE tx_outbox SET fee_paid = $2 WHERE id = $1", [id, feePaid]);
}

export function findOutboxRow(db: Queryable, id: number): Promise<OutboxRow | undefined> {
  return queryOneParsed(db, OutboxRowSchema, "SELECT * FROM tx_outbox WHERE id = $1", [id]);
}

/**
 * Rows of the given kinds that may be on their way to the chain, in nonce order. With `staleMs`, only
 * those no worker has touched for that long (a live worker refreshes `updated_at` as it drives a row).
 */
export function openOutboxRows(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  kinds: readonly string[],
  staleMs: number | undefined,
): Promise<OutboxRow[]> {
  return queryParsed(
    db,
    OutboxRowSchema,
    `SELECT * FROM tx_outbox WHERE status IN ('signed', 'broadcast') AND chain_id = $1 AND sender = $2
       AND kind = ANY($3::text[])
       AND ($4::float8 IS NULL OR updated_at < now() - $4::float8 * interval '1 millisecond')
     ORDER BY nonce, id`,
    [scope.chainId, scope.sender.toLowerCase(), [...kinds], staleMs ?? null],
  );
}

/** Refreshes `updated_at` of rows this worker is driving, so other instances leave them alone. */
export async function touchRows(db: Queryable, ids: readonly number[]): Promise<void> {
  if (ids.length === 0) return;
  await db.query(
    `UPDATE tx_outbox SET updated_at = now() WHERE id = ANY($1::bigint[]) AND status IN ('signed', 'broadcast')`,
    [ids.map(String)],
  );
}

/** Open rows' `meta` of one kind (a producer excluding work already on its way). */
export async function openRowMeta(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  kind: string,
): Promise<Record<string, unknown>[]> {
  const rows = await db.query<{ meta: Record<string, unknown> | null }>(
    `SELECT meta FROM tx_outbox WHERE status IN ('queued', 'signed', 'broadcast') AND chain_id = $1 AND sender = $2
       AND kind = $3`,
    [scope.chainId, scope.sender.toLowerCase(), kind],
  );
  return rows.flatMap((r) => (r.meta === null ? [] : [r.meta]));
}

/**
 * Records a fee bump: the row's transaction at the same nonce re-signed with higher fees. Compare-and-
 * set on the hash it replaces, so of two workers bumping one row exactly one records its bytes (the
 * other reads the row again). The replaced hash stays in `replaced_hashes`: either may be mined.
 */
export async function recordReplacement(
  db: Queryable,
  id: number,
  replaced: Hash,
  next: { hash: Hash; raw: Hex },
): Promise<OutboxRow | undefined> {
  return queryOneParsed(
    db,
    OutboxRowSchema,
    `UPDATE tx_outbox SET tx_hash = $3, raw_tx = $4, replaced_hashes = array_append(replaced_hashes, $2),
       updated_at = now()
     WHERE id = $1 AND tx_hash = $2 AND status IN ('signed', 'broadcast') RETURNING *`,
    [id, replaced, next.hash, next.raw],
  );
}

/**
 * Every row of the gas key holding a nonce in [`from`, `to`), open or final, in nonce order (the rows a
 * rewound chain may have lost; rewindRepair.ts).
 */
export function rowsInNonceRange(
  db: Queryable,
  scope: { chainId: number; sender: Address },
  from: number,
  to: number,
): Promise<OutboxRow[]> {
  return queryParsed(
    db,
    OutboxRowSchema,
    `SELECT * FROM tx_outbox WHERE chain_id = $1 AND sender = $2 AND nonce >= $3 AND nonce < $4
     ORDER BY nonce, id`,
    [scope.chainId, scope.sender.toLowerCase(), from, to],
  );
}
