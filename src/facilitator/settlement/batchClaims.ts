/**
 * Batching: pending payments of one token are claimed into a batch (`FOR UPDATE SKIP LOCKED`, so
 * instances sharing a database claim disjoint rows) and the batch's `settle` call is signed into the
 * transaction outbox in the same store transaction (the outbox's `signingTransaction`: the gas key's
 * nonce taken and the signed bytes recorded there). A batch is therefore never claimed without its
 * transaction recorded, nor its transaction recorded without its payments; the outbox broadcasts it
 * once that transaction commits.
 *
 * A payment that finds its engine idle skips the queue: it is inserted already claimed into a batch of
 * its own, signed in the same transaction (`insertAndClaim`) — what the rule below would do with it.
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
import type { Queryable, Store } from "../../store/store.ts";
import type { Outbox, OutboxRequest } from "../outbox/outboxTypes.ts";
import {
  type BatchRow,
  BatchRowSchema,
  insertClaimedPayment,
  type NewPayment,
  type PaymentRow,
  PaymentRowSchema,
} from "../paymentRecords.ts";

/** The outbox kind of settlement batches. */
export const SETTLEMENT_KIND = "settlement";

/** A claimed batch; `drained` when it took every payment that was pending (no need to look again). */
export type ClaimedBatch = { batch: BatchRow; rows: PaymentRow[]; outboxId: number; drained: boolean };

/** Payments held to fill the next batch: how many wait, and how long the oldest has waited. */
export type HeldBatch = { kind: "held"; waiting: number; ageMs: number };

export async function claimBatch(
  deps: { store: Store; outbox: Outbox; network: string; batchSettler: Address },
  rule: {
    maxBatchSize: number;
    lingerMs: number;
    inFlight: number;
    /**
     * The caller knows a claim is due (nothing in flight and payments just queued, or a hold that ended
     * by its deadline or a full batch): the claiming statement finds the head itself, with no read of
     * its own first.
     */
    claimAtOnce?: boolean | undefined;
    /**
     * Tokens whose payments stay in the queue (lower case): their issuer paused them
     * (tokenPauseWatch.ts), so a batch of them could only be refused.
     */
    heldTokens?: readonly string[] | undefined;
  },
): Promise<ClaimedBatch | HeldBatch | undefined> {
  const held = [...(rule.heldTokens ?? [])];
  if (rule.claimAtOnce === true) return claimHead(deps, rule.maxBatchSize, held);
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
           FROM payments WHERE status = 'pending' AND network = $1 AND NOT (token = ANY($3::text[]))
           ORDER BY id LIMIT 1) AS h`,
    [network, rule.maxBatchSize, held],
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
    const rows = await claimedRows(tx, claimed);
    if (rows === undefined) return undefined;
    const { batchId, parsed } = rows;
    const { batch, outboxId } = await signBatch(deps, tx, enqueue, { id: batchId, token, rows: parsed });
    return {
      batch,
      rows: parsed,
      outboxId,
      drained: parsed.length >= Number(first.total),
    };
  });
}

/**
 * `claimBatch` with the head of the queue read by the claiming statement: its token, the smallest cap
 * among the next batch's rows and the count of pending payments (for `drained`) come from the same
 * snapshot the claim runs on. Saves the head's own statement when no hold is to be decided. An empty
 * queue writes nothing, but costs a transaction where the head's read is one statement: the loop reads
 * first when it does not know of queued payments (at start, on its backstop round).
 */
async function claimHead(
  deps: { store: Store; outbox: Outbox; network: string; batchSettler: Address },
  maxBatchSize: number,
  heldTokens: readonly string[],
): Promise<ClaimedBatch | undefined> {
  const { network } = deps;
  const sender = deps.outbox.sender.toLowerCase();
  return deps.outbox.signingTransaction(async (tx, enqueue) => {
    const claimed = await tx.query<
      Record<string, unknown> & {
        new_batch_id: string;
        batch_token: string;
        pending_total: string;
        id: unknown;
      }
    >(
      `WITH head AS (
         SELECT token FROM payments WHERE status = 'pending' AND network = $1
           AND NOT (token = ANY($4::text[])) ORDER BY id LIMIT 1
       ), batch AS (
         INSERT INTO settlement_batches (network, token, sender, status)
         SELECT $1, token, $2, 'submitted' FROM head
         RETURNING id, token
       ), claimed AS (
         UPDATE payments SET status = 'submitted', batch_id = (SELECT id FROM batch), attempts = attempts + 1,
           updated_at = now()
         WHERE id IN (SELECT id FROM payments WHERE status = 'pending' AND network = $1
                        AND token = (SELECT token FROM head)
                      ORDER BY id
                      LIMIT least($3::int, coalesce((SELECT min(batch_cap) FROM (
                        SELECT batch_cap FROM payments WHERE status = 'pending' AND network = $1
                          AND token = (SELECT token FROM head) ORDER BY id LIMIT $3::int) AS next), $3::int))
                      FOR UPDATE SKIP LOCKED)
         RETURNING *
       )
       SELECT batch.id AS new_batch_id, batch.token AS batch_token,
              (SELECT count(*) FROM payments WHERE status = 'pending' AND network = $1
                 AND NOT (token = ANY($4::text[]))) AS pending_total,
              claimed.*
       FROM batch LEFT JOIN claimed ON true`,
      [network, sender, maxBatchSize, [...heldTokens]],
    );
    const first = claimed[0];
    // No head: the queue was empty and no batch row was inserted.
    if (first === undefined) return undefined;
    const rows = await claimedRows(tx, claimed);
    if (rows === undefined) return undefined;
    const { batchId, parsed } = rows;
    const { batch, outboxId } = await signBatch(deps, tx, enqueue, {
      id: batchId,
      token: first.batch_token,
      rows: parsed,
    });
    return { batch, rows: parsed, outboxId, drained: parsed.length >= Number(first.pending_total) };
  });
}

/**
 * The path of a payment that arrives while its engine has nothing in flight and no claim running: the
 * batching rule would send it at once, alone, so its row is inserted already claimed into a batch of its
 * own and that batch's call signed, in one store transaction. What the usual path spends between the
 * insert and the claim — the insert's own commit, the read of the queue's head, the loop's turn — is
 * saved; the batch, its rows and its transaction are what a claim writes. `undefined` when the nonce is
 * taken (nothing is written; the caller looks up the row that holds it).
 */
export async function insertAndClaim(
  deps: { store: Store; outbox: Outbox; network: string; batchSettler: Address },
  payment: NewPayment,
): Promise<ClaimedBatch | undefined> {
  try {
    return await deps.outbox.signingTransaction(async (tx, enqueue) => {
      const row = await insertClaimedPayment(tx, payment, deps.outbox.sender);
      if (row === undefined) throw nonceTaken;
      if (row.batch_id === null) throw new TollgateError("Internal", "a claimed payment has no batch");
      const { batch, outboxId } = await signBatch(deps, tx, enqueue, {
        id: row.batch_id,
        token: row.token,
        rows: [row],
      });
      return { batch, rows: [row], outboxId, drained: true };
    });
  } catch (error) {
    if (error === nonceTaken) return undefined;
    throw error;
  }
}

/**
 * The payments a claiming statement returned (each row carries the new batch's id, one row with no
 * payment columns when it claimed nothing), oldest first; `undefined` when it claimed nothing (the rows
 * were locked by another instance meanwhile), after deleting the empty batch it inserted.
 */
async function claimedRows(
  tx: Queryable,
  claimed: readonly (Record<string, unknown> & { new_batch_id: string; id: unknown })[],
): Promise<{ batchId: number; parsed: PaymentRow[] } | undefined> {
  const batchId = Number(claimed[0]?.new_batch_id);
  if (!Number.isSafeInteger(batchId)) throw new TollgateError("Internal", "batch insert returned nothing");
  const parsed = claimed
    .filter((r) => r.id !== null)
    .map((r) => PaymentRowSchema.parse(r))
    .sort((x, y) => x.id - y.id);
  if (parsed.length > 0) return { batchId, parsed };
  await tx.query("DELETE FROM settlement_batches WHERE id = $1", [batchId]);
  return undefined;
}

/** Thrown to roll back `insertAndClaim`'s transaction (its batch row) when the nonce was taken. */
const nonceTaken = new Error("nonce taken");

/** A claimed batch's `settle` call, signed into the outbox in the claim's transaction, and its count. */
async function signBatch(
  deps: { outbox: Outbox; network: string; batchSettler: Address },
  tx: Queryable,
  enqueue: (request: OutboxRequest) => Promise<number>,
  claimed: { id: number; token: string; rows: readonly PaymentRow[] },
): Promise<{ batch: BatchRow; outboxId: number }> {
  const { rows, token } = claimed;
  const batch: BatchRow = BatchRowSchema.parse({
    id: claimed.id,
    status: "submitted",
    network: deps.network,
    token,
    sender: deps.outbox.sender.toLowerCase(),
    sender_nonce: null,
    tx_hash: null,
    raw_tx: null,
    item_count: rows.length,
  });
  const call = settleCall({
    settler: deps.batchSettler,
    token: token as Address,
    items: rows.map((r) => ({
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
  const outboxId = await enqueue({ ...call, kind: SETTLEMENT_KIND, owner: String(batch.id) });
  await tx.query("UPDATE settlement_batches SET item_count = $2, outbox_id = $3 WHERE id = $1", [
    batch.id,
    rows.length,
    outboxId,
  ]);
  return { batch, outboxId };
}
