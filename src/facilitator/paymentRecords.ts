/**
 * The facilitator's payment and batch rows (migrations 0001, 0003 and 0066), read through zod.
 * Addresses and hashes are stored lowercase; amounts as numeric. `payments.batch_cap` (0066) is read
 * only by the settlement engine's claim query and is left out of the row schema.
 */
import { z } from "zod";
import { PaymentProofSchema } from "../protocol/paymentProof.ts";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../store/queryParsed.ts";
import type { Queryable } from "../store/store.ts";

const HexText = z.string().regex(/^0x[0-9a-f]*$/);
const AddressText = z.string().regex(/^0x[0-9a-f]{40}$/) as z.ZodType<`0x${string}`>;
const Hash = z.string().regex(/^0x[0-9a-f]{64}$/) as z.ZodType<`0x${string}`>;

export const PaymentStatusSchema = z.enum(["pending", "submitted", "settled", "failed"]);
export type PaymentStatus = z.infer<typeof PaymentStatusSchema>;

export const PaymentRowSchema = z.object({
  id: SafeIntColumnSchema,
  nonce: Hash,
  network: z.string(),
  token: AddressText,
  payer: AddressText,
  pay_to: AddressText,
  amount: BigintColumnSchema,
  memo: z.string().nullable(),
  scheme: z.string(),
  source: z.enum(["tollgate", "x402"]),
  valid_after: BigintColumnSchema,
  valid_before: BigintColumnSchema,
  signature: HexText as z.ZodType<`0x${string}`>,
  status: PaymentStatusSchema,
  batch_id: SafeIntColumnSchema.nullable(),
  tx_hash: Hash.nullable(),
  block_number: BigintColumnSchema.nullable(),
  failure_code: z.string().nullable(),
  failure_message: z.string().nullable(),
  proof: PaymentProofSchema.nullable(),
  attempts: z.number().int(),
  created_at: TimestampColumnSchema,
  settled_at: TimestampColumnSchema.nullable(),
});
export type PaymentRow = z.infer<typeof PaymentRowSchema>;

export const BatchStatusSchema = z.enum(["pending", "submitted", "confirmed", "failed"]);

export const BatchRowSchema = z.object({
  id: SafeIntColumnSchema,
  status: BatchStatusSchema,
  network: z.string(),
  token: AddressText.nullable(),
  sender: AddressText.nullable(),
  sender_nonce: SafeIntColumnSchema.nullable(),
  tx_hash: Hash.nullable(),
  raw_tx: HexText.nullable(),
  item_count: z.number().int(),
});
export type BatchRow = z.infer<typeof BatchRowSchema>;

export type NewPayment = {
  nonce: string;
  network: string;
  token: string;
  payer: string;
  payTo: string;
  amount: bigint;
  memo: string | undefined;
  source: "tollgate" | "x402";
  validAfter: bigint;
  validBefore: bigint;
  signature: string;
};

/** Inserts a pending payment; returns `undefined` when a payment with this nonce already exists. */
export async function insertPayment(db: Queryable, p: NewPayment): Promise<PaymentRow | undefined> {
  return (await insertPayments(db, [p]))[0];
}

/** A new payment's values as stored (addresses, nonce and signature lowercase), in the inserts' column order. */
function storedValues(p: NewPayment) {
  return [
    p.nonce.toLowerCase(),
    p.network,
    p.token.toLowerCase(),
    p.payer.toLowerCase(),
    p.payTo.toLowerCase(),
    p.amount,
    p.memo ?? null,
    p.source,
    p.validAfter,
    p.validBefore,
    p.signature.toLowerCase(),
  ] as const;
}

/**
 * Inserts pending payments in one statement (the payments checked together, settlement/coalescer.ts);
 * returns the rows inserted, in no particular order. A nonce already stored, or given twice, is
 * inserted once at most (`ON CONFLICT DO NOTHING`): the caller looks up the row that holds it.
 */
export async function insertPayments(db: Queryable, payments: readonly NewPayment[]): Promise<PaymentRow[]> {
  if (payments.length === 0) return [];
  const rows = payments.map(storedValues);
  return queryParsed(
    db,
    PaymentRowSchema,
    `INSERT INTO payments (nonce, network, token, payer, pay_to, amount, memo, scheme, source,
       valid_after, valid_before, signature)
     SELECT nonce, network, token, payer, pay_to, amount, memo, 'exact', source, valid_after, valid_before,
       signature
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::numeric[], $7::text[],
       $8::text[], $9::numeric[], $10::numeric[], $11::text[])
       AS input (nonce, network, token, payer, pay_to, amount, memo, source, valid_after, valid_before,
         signature)
     ON CONFLICT (nonce) DO NOTHING
     RETURNING *`,
    // One array per column ($1 … $11), each holding that value of every payment.
    rows[0]!.map((_, i) => rows.map((row) => row[i])),
  );
}

/**
 * Inserts one payment already claimed into a new batch of its own — the batch row (`submitted`) and the
 * payment (`submitted`, its first attempt) in one statement. Returns the row, whose `batch_id` names
 * the batch; `undefined` when a payment with this nonce already exists, in which case the batch row was
 * inserted all the same and the caller rolls its transaction back.
 */
export async function insertClaimedPayment(
  db: Queryable,
  p: NewPayment,
  sender: string,
): Promise<PaymentRow | undefined> {
  return queryOneParsed(
    db,
    PaymentRowSchema,
    `WITH batch AS (
       INSERT INTO settlement_batches (network, token, sender, status) VALUES ($2, $3, $12, 'submitted')
       RETURNING id
     )
     INSERT INTO payments (nonce, network, token, payer, pay_to, amount, memo, scheme, source,
       valid_after, valid_before, signature, status, batch_id, attempts)
     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::numeric, $7::text, 'exact', $8::text,
       $9::numeric, $10::numeric, $11::text, 'submitted', batch.id, 1
     FROM batch
     ON CONFLICT (nonce) DO NOTHING
     RETURNING *`,
    [...storedValues(p), sender.toLowerCase()],
  );
}

export function findPaymentByNonce(db: Queryable, nonce: string): Promise<PaymentRow | undefined> {
  return queryOneParsed(db, PaymentRowSchema, "SELECT * FROM payments WHERE nonce = $1", [
    nonce.toLowerCase(),
  ]);
}

export function findPaymentsByNonce(db: Queryable, nonces: readonly string[]): Promise<PaymentRow[]> {
  return queryParsed(db, PaymentRowSchema, "SELECT * FROM payments WHERE nonce = ANY($1::text[])", [
    nonces.map((n) => n.toLowerCase()),
  ]);
}

/** Puts a failed payment back in the queue, if it is still failed (another request may have won). */
export async function requeueFailedPayment(db: Queryable, id: number): Promise<boolean> {
  const rows = await db.query(
    `UPDATE payments SET status = 'pending', failure_code = NULL, failure_message = NULL, batch_id = NULL,
       batch_cap = NULL, updated_at = now() WHERE id = $1 AND status = 'failed' RETURNING id`,
    [id],
  );
  return rows.length === 1;
}

export function batchPayments(db: Queryable, batchId: number): Promise<PaymentRow[]> {
  return queryParsed(db, PaymentRowSchema, "SELECT * FROM payments WHERE batch_id = $1 ORDER BY id", [
    batchId,
  ]);
}

/** Batches whose transaction may be on its way: signed and perhaps broadcast, outcome not recorded. */
export function openBatches(db: Queryable, network: string, sender: string): Promise<BatchRow[]> {
  return queryParsed(
    db,
    BatchRowSchema,
    `SELECT * FROM settlement_batches WHERE status IN ('pending', 'submitted') AND network = $1
       AND (sender = $2 OR sender IS NULL) ORDER BY sender_nonce NULLS FIRST, id`,
    [network, sender.toLowerCase()],
  );
}
