/**
 * The settlement kind's reopen hook (outbox/confirmedRowWatch.ts): a one-time settlement batch whose
 * transaction a reorganisation took off the chain goes back to `submitted` with its payments, in the
 * store transaction that reopens its outbox row, so the outbox sends the recorded bytes again and
 * batchOutcome.ts records the new receipt as a first outcome (docs/facilitator.md, "Reorganisations").
 *
 * Invariants:
 * 1. Every write is a compare-and-set on the state it leaves, and runs only when the outbox row moved
 *    (the watch's compare-and-set): two instances reopen a batch once; a crash before the commit leaves
 *    it all confirmed. The payments are never in no state, and never in the queue while their old
 *    transaction can still be mined: they stay `submitted` in their batch.
 * 2. A payment the batch settled loses its proof and keeps the `block_number` of the undone settlement,
 *    which paymentOutcomes.ts reads as the mark of one already announced: settled again, it gets no
 *    second `payment.settled` and is not counted again.
 * 3. A payment the batch recorded as failed goes back to `submitted` too: the re-sent bytes carry its
 *    transfer, and the token may take it on the new chain (the payer's balance came back), so only the
 *    new receipt says what happened. It keeps its `failure_code`, the mark of one whose
 *    `payment.failed` was announced: failing again announces nothing more; settled, it is announced
 *    `payment.settled` (a first settlement).
 * 4. The token refuses a second use of an authorization, so nothing is paid twice; an item someone else
 *    meanwhile settled with exactly its transfer is settled by that transaction; one the token now
 *    refuses (the payer emptied the wallet) fails, and its `payment.failed` tells the provider who
 *    already served on the proof.
 */
import type { Logger } from "pino";
import type { Queryable } from "../../store/store.ts";
import type { OutboxReopenHook, ReopenedRow } from "../outbox/outboxTypes.ts";

export function createReopenSettledBatch(logger: Logger): OutboxReopenHook {
  const log = logger.child({ component: "settlement" });
  return async (tx: Queryable, row: ReopenedRow) => {
    const batches = await tx.query<{ id: string }>(
      `UPDATE settlement_batches SET status = 'submitted', block_number = NULL, updated_at = now()
       WHERE outbox_id = $1 AND status = 'confirmed' RETURNING id`,
      [row.id],
    );
    const batchId = batches[0]?.id;
    if (batchId === undefined) return;
    const settled = await tx.query(
      `UPDATE payments SET status = 'submitted', tx_hash = NULL, proof = NULL, settled_at = NULL,
         updated_at = now()
       WHERE batch_id = $1 AND status = 'settled' AND tx_hash = $2 RETURNING id`,
      [batchId, row.hash.toLowerCase()],
    );
    const failed = await tx.query(
      `UPDATE payments SET status = 'submitted', tx_hash = NULL, updated_at = now()
       WHERE batch_id = $1 AND status = 'failed' AND tx_hash = $2 RETURNING id`,
      [batchId, row.hash.toLowerCase()],
    );
    log.warn(
      {
        batch: Number(batchId),
        transaction: row.hash,
        blockNumber: row.blockNumber.toString(),
        settled: settled.length,
        failed: failed.length,
      },
      "a settled batch left the chain (a reorganisation); its transaction is sent again",
    );
  };
}
