/**
 * Recording a payment's outcome: the row's final status, its proof, the `payment.settled` /
 * `payment.failed` event (in the same store transaction) and one log line. Each write is a compare-and-
 * set on the row's status, so an outcome recorded twice (two instances, a restart) is recorded once.
 */
import type { Logger } from "pino";
import { getAddress, type Hash } from "viem";
import type { TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import { blacklistedFields } from "../blacklistRefusal.ts";
import { type PaymentRow, PaymentRowSchema } from "../paymentRecords.ts";
import type { ProofKey } from "../proofKeys.ts";
import { issuePaymentProof } from "./issuePaymentProof.ts";

export type PaymentOutcomeDeps = {
  proofKey: () => ProofKey;
  proofTtlSeconds: number;
  logger: Logger;
  onFailed?: ((code: string) => void) | undefined;
};

export type Settlement = { txHash: Hash; blockNumber: bigint; nowSeconds: number };

/** A batch closed by the same statement that settles its payments (`markPaymentsSettled`). */
export type BatchClose = {
  id: number;
  status: "confirmed" | "failed";
  txHash: Hash | null;
  blockNumber: bigint | null;
};

/**
 * Marks a row settled by `txHash` and stores its proof; a no-op unless the row is in `from`. Resolves
 * with the settled row (what `/authorize` answers from), `undefined` when it was not in `from`.
 */
export async function markPaymentSettled(
  deps: PaymentOutcomeDeps,
  tx: Queryable,
  row: PaymentRow,
  settled: Settlement,
  from: "submitted" | "failed" = "submitted",
): Promise<PaymentRow | undefined> {
  const [done] = await markPaymentsSettled(deps, tx, [{ row, settled }], { from });
  return done;
}

/**
 * Marks rows settled, each by its own transaction, with their proofs and `payment.settled` events,
 * and with `close` also closes their batch: one statement for all of it, so that a batch's outcome
 * costs the store one round trip however many payments it settled. Each row is a compare-and-set on
 * its status (`from`) and, when `close` names a batch, on being in that batch; resolves with the rows
 * it settled as they now are, in id order.
 */
export async function markPaymentsSettled(
  deps: PaymentOutcomeDeps,
  tx: Queryable,
  items: readonly { row: PaymentRow; settled: Settlement }[],
  options: { from?: "submitted" | "failed" | undefined; close?: BatchClose | undefined } = {},
): Promise<PaymentRow[]> {
  if (items.length === 0 && options.close === undefined) return [];
  const key = deps.proofKey();
  const ids: number[] = [];
  const hashes: string[] = [];
  const blocks: bigint[] = [];
  const proofs: (string | null)[] = [];
  const events: string[] = [];
  for (const { row, settled } of items) {
    ids.push(row.id);
    hashes.push(settled.txHash);
    blocks.push(settled.blockNumber);
    const proof = issuePaymentProof(key, row, {
      txHash: settled.txHash,
      nowSeconds: settled.nowSeconds,
      ttlSeconds: deps.proofTtlSeconds,
    });
    // An x402 payment has no proof: SQL NULL, not JSON null.
    proofs.push(proof === null ? null : JSON.stringify(proof));
    events.push(
      JSON.stringify(
        eventData(row, { transaction: settled.txHash, blockNumber: settled.blockNumber.toString() }),
      ),
    );
  }
  const close = options.close;
  // The rows, their events (inserted only for rows that were in `from`) and the batch in one statement.
  // A row with a `block_number` (only this statement writes it) was settled and announced before, by a
  // batch a reorganisation undid (reopenSettledBatch.ts): settled again, it gets no second `payment.settled`.
  const updated = await tx.query(
    `WITH input AS (
       SELECT * FROM unnest($1::bigint[], $2::text[], $3::numeric[], $4::text[], $5::text[])
         AS i(id, tx_hash, block_number, proof, event)
     ), announced AS (
       SELECT id FROM payments WHERE id = ANY($1::bigint[]) AND block_number IS NOT NULL
     ), settled AS (
       UPDATE payments p SET status = 'settled', tx_hash = i.tx_hash, block_number = i.block_number,
         proof = i.proof::jsonb, settled_at = now(), failure_code = NULL, failure_message = NULL,
         batch_cap = NULL, updated_at = now()
       FROM input i
       WHERE p.id = i.id AND p.status = $6 AND ($7::bigint IS NULL OR p.batch_id = $7)
       RETURNING p.*, i.event AS settled_event
     ), recorded AS (
       INSERT INTO events (type, data) SELECT 'payment.settled', settled_event::jsonb FROM settled
       WHERE id NOT IN (SELECT id FROM announced) ORDER BY id
     ), closed AS (
       UPDATE settlement_batches SET status = $8, tx_hash = coalesce($9, tx_hash), block_number = $10,
         updated_at = now()
       WHERE id = $7
     )
     SELECT * FROM settled ORDER BY id`,
    [
      ids,
      hashes,
      blocks,
      proofs,
      events,
      options.from ?? "submitted",
      close?.id ?? null,
      close?.status ?? null,
      close?.txHash ?? null,
      close?.blockNumber ?? null,
    ],
  );
  const rows = updated.map((r) => PaymentRowSchema.parse(r));
  const byId = new Map(items.map((item) => [item.row.id, item.settled]));
  for (const row of rows) {
    const settled = byId.get(row.id);
    deps.logger.info(
      {
        ...paymentLogFields(row),
        event: "payment.settled",
        transaction: settled?.txHash,
        blockNumber: settled?.blockNumber.toString(),
      },
      "payment settled",
    );
  }
  return rows;
}

/** Marks a submitted row failed with `refusal`; a no-op unless it is still submitted in its batch. */
export async function markPaymentFailed(
  deps: PaymentOutcomeDeps,
  tx: Queryable,
  row: PaymentRow,
  refusal: TollgateError,
  txHash: Hash | null,
): Promise<void> {
  const updated = await tx.query(
    `UPDATE payments SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
       updated_at = now() WHERE id = $1 AND status = 'submitted' AND batch_id = $5 RETURNING id`,
    [row.id, refusal.code, refusal.message, txHash, row.batch_id],
  );
  if (updated.length === 0) return;
  // A payment whose failure was announced before a reorganisation undid its batch (it keeps its
  // failure_code; reopenSettledBatch.ts) failing again on the new chain is not announced twice.
  if (row.failure_code !== null) return;
  const transaction = txHash === null ? {} : { transaction: txHash };
  deps.logger.info(
    {
      ...paymentLogFields(row),
      event: "payment.failed",
      code: refusal.code,
      ...blacklistedFields(refusal),
      ...transaction,
    },
    "payment failed",
  );
  await tx.query("INSERT INTO events (type, data) VALUES ('payment.failed', $1)", [
    eventData(row, {
      code: refusal.code,
      message: refusal.message,
      ...blacklistedFields(refusal),
      ...transaction,
    }),
  ]);
  deps.onFailed?.(refusal.code);
}

/**
 * Puts a submitted row back in the queue (optionally capped to a batch size, see batchClaims.ts); a
 * no-op unless it is still submitted in its batch.
 */
export async function requeuePayment(
  tx: Queryable,
  row: PaymentRow,
  options: { cap?: number | undefined; refundAttempt?: boolean | undefined } = {},
): Promise<void> {
  await tx.query(
    `UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now(),
       batch_cap = coalesce($2, batch_cap),
       attempts = CASE WHEN $3 THEN greatest(attempts - 1, 0) ELSE attempts END
     WHERE id = $1 AND status = 'submitted' AND batch_id = $4`,
    [row.id, options.cap ?? null, options.refundAttempt === true, row.batch_id],
  );
}

/**
 * What a log line says of a payment. Never the memo, the signature or the proof: a memo with the
 * public authorization is enough to have `/authorize` hand the proof out again (createLogger.ts).
 */
export function paymentLogFields(row: PaymentRow): Record<string, unknown> {
  return {
    source: row.source,
    // Checksummed, as in refusal lines (the store keeps lower case).
    payer: getAddress(row.payer),
    payTo: getAddress(row.pay_to),
    amount: row.amount.toString(),
    network: row.network,
    token: getAddress(row.token),
  };
}

function eventData(row: PaymentRow, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    nonce: row.nonce,
    network: row.network,
    token: row.token,
    payer: row.payer,
    payTo: row.pay_to,
    amount: row.amount.toString(),
    source: row.source,
    ...(row.memo === null ? {} : { memo: row.memo }),
    ...extra,
  };
}
