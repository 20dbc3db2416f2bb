/**
 * The usage kind's reopen hook (outbox/confirmedRowWatch.ts): a deduction batch a reorganisation undid
 * goes back to `submitted` in the transaction that reopens its outbox row, and so do the records its
 * receipt settled or failed (tx_hash names it), so the outcome handler (usageBatchOutcome.ts) records
 * the re-sent transaction's receipt as a first outcome: settled once, or failed with the reason the new
 * chain gives. Records settled by an earlier transaction (a ref used before) keep it. Every write is a
 * compare-and-set on the state it leaves.
 */
import type { Logger } from "pino";
import type { OutboxReopenHook } from "../../../../facilitator/outbox/outboxTypes.ts";

export function createReopenUsageBatch(log: Logger): OutboxReopenHook {
  return async (tx, row) => {
    const batches = await tx.query<{ id: string }>(
      `UPDATE usage_batches SET status = 'submitted', block_number = NULL, updated_at = now()
       WHERE outbox_id = $1 AND status = 'confirmed' RETURNING id`,
      [row.id],
    );
    const batchId = batches[0]?.id;
    if (batchId === undefined) return;
    const records = await tx.query(
      `UPDATE usage_records SET status = 'submitted', settled_at = NULL, failure_code = NULL,
         failure_message = NULL, updated_at = now()
       WHERE batch_id = $1 AND status IN ('settled', 'failed') AND tx_hash = $2 RETURNING id`,
      [batchId, row.hash.toLowerCase()],
    );
    log.warn(
      { batch: Number(batchId), tx: row.hash, records: records.length },
      "a usage batch left the chain (a reorganisation); its transaction is sent again",
    );
  };
}
