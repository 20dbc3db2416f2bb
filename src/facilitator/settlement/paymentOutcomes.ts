/**
 * Recording a payment's outcome: the row's final status, its proof, the `payment.settled` /
 * `payment.failed` event (in the same store transaction) and one log line. Each write is a compare-and-
 * set on the row's status, so an outcome recorded twice (two instances, a restart) is recorded once.
 */
import type { Logger } from "pino";
import { getAddress, type Hash } from "viem";
import type { TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import { type PaymentRow, PaymentRowSchema } from "../paymentRecords.ts";
import type { ProofKey } from "../proofKeys.ts";
import { issuePaymentProof } from "./issuePaymentProof.ts";

export type PaymentOutcomeDeps = {
  proofKey: () => ProofKey;
  proofTtlSeconds: number;
  logger: Logger;
  onFailed?: ((code: string) => void) | undefined;
};

/**
 * Marks a row settled by `txHash` and stores its proof; a no-op unless the row is in `from`. Resolves
 * with the settled row (what `/authorize` answers from), `undefined` when it was not in `from`.
 */
export async function markPaymentSettled(
  deps: PaymentOutcomeDeps,
  tx: Queryable,
  row: PaymentRow,
  settled: { txHash: Hash; blockNumber: bigint; nowSeconds: number },
  from: "submitted" | "failed" = "submitted",
): Promise<PaymentRow | undefined> {
  const proof = issuePaymentProof(deps.proofKey(), row, {
    txHash: settled.txHash,
    nowSeconds: settled.nowSeconds,
    ttlSeconds: deps.proofTtlSeconds,
  });
  // The row and its event in one statement: the event is inserted only if the row was in `from`.
  const updated = await tx.query(
    `WITH settled AS (
       UPDATE payments SET status = 'settled', tx_hash = $2, block_number = $3, proof = $4, settled_at = now(),
         failure_code = NULL, failure_message = NULL, batch_cap = NULL, updated_at = now()
       WHERE id = $1 AND status = $5 RETURNING *
     ), recorded AS (
       INSERT INTO events (type, data) SELECT 'payment.settled', $6::jsonb FROM settled
     )
     SELECT * FROM settled`,
    [
      row.id,
      settled.txHash,
      settled.blockNumber,
      proof,
      from,
      eventData(row, { transaction: settled.txHash, blockNumber: settled.blockNumber.toString() }),
    ],
  );
  if (updated.length === 0) return undefined;
  deps.logger.info(
    {
      ...paymentLogFields(row),
      event: "payment.settled",
      transaction: settled.txHash,
      blockNumber: settled.blockNumber.toString(),
    },
    "payment settled",
  );
  return PaymentRowSchema.parse(updated[0]);
}

/** Marks a submitted row failed with `refusal`; a no-op unless it is still submitted. */
export async function markPaymentFailed(
  deps: PaymentOutcomeDeps,
  tx: Queryable,
  row: PaymentRow,
  refusal: TollgateError,
  txHash: Hash | null,
): Promise<void> {
  const updated = await tx.query(
    `UPDATE payments SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
       updated_at = now() WHERE id = $1 AND status = 'submitted' RETURNING id`,
    [row.id, refusal.code, refusal.message, txHash],
  );
  if (updated.length === 0) return;
  const transaction = txHash === null ? {} : { transaction: txHash };
  deps.logger.info(
    { ...paymentLogFields(row), event: "payment.failed", code: refusal.code, ...transaction },
    "payment failed",
  );
  await tx.query("INSERT INTO events (type, data) VALUES ('payment.failed', $1)", [
    eventData(row, { code: refusal.code, message: refusal.message, ...transaction }),
  ]);
  deps.onFailed?.(refusal.code);
}

/** Puts a submitted row back in the queue (optionally capped to a batch size, see batchClaims.ts). */
export async function requeuePayment(
  tx: Queryable,
  row: PaymentRow,
  options: { cap?: number | undefined; refundAttempt?: boolean | undefined } = {},
): Promise<void> {
  await tx.query(
    `UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now(),
       batch_cap = coalesce($2, batch_cap),
       attempts = CASE WHEN $3 THEN greatest(attempts - 1, 0) ELSE attempts END
     WHERE id = $1 AND status = 'submitted'`,
    [row.id, options.cap ?? null, options.refundAttempt === true],
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
