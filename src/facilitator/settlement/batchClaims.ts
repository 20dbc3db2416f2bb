/**
 * Batching: pending payments of one token are claimed into a batch (`FOR UPDATE SKIP LOCKED`, so
 * instances sharing a database claim disjoint rows) and the batch's `settle` call is signed into the
 * transaction outbox in the same store transaction (the outbox's `signingTransaction`: the gas key's
 * nonce taken and the signed bytes recorded there). A batch is therefore never claimed without its
 * transaction recorded, nor its transaction recorded without its payments; the outbox broadcasts it
 * once that transaction commits.
 *
 * Batching rule: with no batch of this engine in flight, send at once (lowest latency when idle). While
 * one is in flight, arrivals gather into the next until it is full or its oldest payment has lingered
 * `lingerMs`; under load this turns many payments into one transaction. Payments of a batch that
 * reverted carry a cap (half that batch's size): the batch they join is no larger, so repeated splits
 * isolate the payment that makes batches revert.
 */
import type { Address } from "viem";
import { settleCall } from "../../chain/actions/settler/settleCall.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import type { Outbox } from "../outbox/outboxTypes.ts";
import { type BatchRow, BatchRowSchema, type PaymentRow, PaymentRowSchema } from "../paymentRecords.ts";

/** The outbox kind of settlement batches. */
export const SETTLEMENT_KIND = "settlement";

/** A claimed batch; `drained` when it took every payment that was pending (no need to look again). */
export type ClaimedBatch = { batch: BatchRow; rows: PaymentRow[]; outboxId: number; drained: boolean };

/** Payments held to fill the next batch: how many wait, and how long the oldest has waited. */
export type HeldBatch = { kind: "held"; waiting: number; ageMs: number };

export async function claimBatch(
  deps: { store: Store; outbox: Outbox; network: string; batchSettler: Address },
  rule: { maxBatchSize: number; lingerMs: number; inFlight: number },
): Promise<ClaimedBatch | HeldBatch | undefined> {
  const { network } = deps;
  // The head of the queue and, for its token, the smallest cap among the next batch's rows. Read on its
  // own: deciding to hold costs one statement, and the claim below takes only rows still pending.
  const head = await deps.store.query<{
    token: string;
    waiting: string;
    total: string;
    age_ms: number;
    cap: number | null;
  }>(
    `SELECT h.*, (SELECT min(batch_cap) FROM (SELECT batch_cap FROM payments
                    WHERE status = 'pending' AND network = $1 AND token = h.token
                    ORDER BY id LIMIT $2) AS next) AS cap
     FROM (SELECT token, count(*) OVER (PARTITION BY token) AS waiting, count(*) OVER () AS total,
                  (extract(epoch FROM now() - created_at) * 1000)::float8 AS age_ms
           FROM payments WHERE status = 'pending' AND network = $1 ORDER BY id LIMIT 1) AS h`,
    [network, rule.maxBatchSize],
  );
  const first = head[0];
  if (first === undefined) return undefined;
  const token = first.token;
  const waiting = Number(first.waiting);
  if (rule.inFlight > 0 && waiting < rule.maxBatchSize && first.age_ms < rule.lingerMs) {
    return { kind: "held", waiting, ageMs: first.age_ms };
  }
  const limit = Math.min(rule.maxBatchSize, first.cap ?? rule.maxBatchSize);
  const sender = deps.outbox.sender.toLowerCase();
  return deps.outbox.signingTransaction(async (tx, enqueue) => {
    // The batch row and its claim in one statement; the batch's id comes back on every row, and alone
    // (with no payment columns) when the rows were claimed by another instance in the meantime.
    const claimed = await tx.query<Record<string, unknown> & { new_batch_id: string; id: unknown }>(
      `WITH batch AS (
         INSERT INTO settlement_batches (network, token, sender, status) VALUES ($1, $2, $3, 'submitted')
         RETURNING id
       ), claimed AS (
         UPDATE payments SET status = 'submitted', batch_id = (SELECT id FROM batch), attempts = attempts + 1,
           updated_at = now()
         WHERE id IN (SELECT id FROM payments WHERE status = 'pending' AND network = $1 AND token = $2
                      ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
         RETURNING *
       )
       SELECT batch.id AS new_batch_id, claimed.* FROM batch LEFT JOIN claimed ON true`,
      [network, token, sender, limit],
    );
    const batchId = Number(claimed[0]?.new_batch_id);
    if (!Number.isSafeInteger(batchId)) throw new TollgateError("Internal", "batch insert returned nothing");
    const parsed = claimed
      .filter((r) => r.id !== null)
      .map((r) => PaymentRowSchema.parse(r))
      .sort((x, y) => x.id - y.id);
    if (parsed.length === 0) {
      await tx.query("DELETE FROM settlement_batches WHERE id = $1", [batchId]);
      return undefined;
    }
    const batch: BatchRow = BatchRowSchema.parse({
      id: batchId,
      status: "submitted",
      network,
      token,
      sender,
      sender_nonce: null,
      tx_hash: null,
      raw_tx: null,
      item_count: parsed.length,
    });
    const call = settleCall({
      settler: deps.batchSettler,
      token: token as Address,
      items: parsed.map((r) => ({
        authorization: {
          from: r.payer,
          to: r.pay_to,
          value: r.amount,
          validAfter: r.valid_after,
          validBefore: r.valid_before,
          nonce: r.nonce,
        },
        signature: r.signature,
      })),
    });
    const outboxId = await enqueue({
      ...call,
      kind: SETTLEMENT_KIND,
      owner: String(batch.id),
    });
    await tx.query("UPDATE settlement_batches SET item_count = $2, outbox_id = $3 WHERE id = $1", [
      batch.id,
      parsed.length,
      outboxId,
    ]);
    return {
      batch,
      rows: parsed,
      outboxId,
      drained: parsed.length >= Number(first.total),
    };
  });
}
