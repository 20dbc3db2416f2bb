/**
 * Driving one outbox row to its outcome (createOutbox.ts runs one drive per open row): broadcast its
 * recorded bytes, wait for a receipt of any of its hashes, replace it with a higher fee when it sits
 * unmined, and deliver the outcome to its producer's handler.
 *
 * Invariants (numbered as in createOutbox.ts):
 * 1. Nothing is broadcast that is not recorded: a replacement's bytes and hash commit (compare-and-set
 *    on the hash it replaces) before they are sent, and the replaced hash stays in `replaced_hashes`.
 * 2. A replacement is the same call at the same nonce (`to`, `data`, `value`, `gas`), re-signed with
 *    fees at least 12.5 % above the previous ones (what nodes ask of a replacement) and at least what
 *    the chain asks now, never above `maxFeePerGas`. Whichever of the row's transactions is mined is
 *    its outcome; the others can no longer be (one nonce), so the producer is told once.
 * 3. When the node refuses bytes for good, the row is `dropped`/`refused` and its nonce filled by a
 *    zero-value transfer to self; a refused replacement is not that: the earlier transaction is still
 *    pending, so the row keeps waiting and bumps again later.
 * 4. A fee the chain asks above `maxFeePerGas` makes a row wait, never drops it: a bump that would pass
 *    the ceiling is not signed, bytes the node refuses as below the block's base fee are broadcast again
 *    each round, and the row is counted in `feeHold` (feeHold.ts) until its outcome is recorded.
 *
 * Parts: the outcomes and the refusal with its nonce filler (rowOutcomes.ts), the fee bump
 * (feeBump.ts), the waits for a receipt (receiptWaits.ts); their options (rowDriverTypes.ts).
 */
import { parseTransaction } from "viem";
import { TollgateError } from "../../protocol/errors.ts";
import { broadcastRaw } from "./broadcastRaw.ts";
import { holdForFee } from "./feeBump.ts";
import { markBroadcast, type OutboxRow } from "./outboxRecords.ts";
import { awaitReceipt, earlyReceipt } from "./receiptWaits.ts";
import type { RowDriver, RowDriverOptions } from "./rowDriverTypes.ts";
import { RowOutcomes } from "./rowOutcomes.ts";
import { findRowReceipt, outcomeBase } from "./rowReceipts.ts";

export type { OutboxFaults, RowDriver, RowDriverClient, RowDriverOptions } from "./rowDriverTypes.ts";
export { FILLER_KIND } from "./rowOutcomes.ts";

export function createRowDriver(options: RowDriverOptions): RowDriver {
  const outcomes = new RowOutcomes(options);
  return {
    drive: (row, fresh) => driveRow(options, outcomes, row, fresh),
    recent: (id) => outcomes.recent.get(id),
    lastSeenBlock: () => outcomes.lastSeenBlock,
  };
}

async function driveRow(
  options: RowDriverOptions,
  outcomes: RowOutcomes,
  row: OutboxRow,
  fresh: boolean,
): Promise<void> {
  const { client, store } = options;
  if (row.raw_tx === null || row.tx_hash === null)
    throw new TollgateError("Internal", "an open outbox row has no transaction");
  if (fresh) await options.faults?.afterSign?.(row);
  else {
    const receipt = await findRowReceipt(client, row);
    if (receipt !== undefined) return outcomes.finish(row, outcomes.outcomeOf(row, receipt));
  }
  const sent = await broadcastRaw(client, row.raw_tx);
  if (sent.kind === "nonce-used") return displaced(options, outcomes, row);
  if (sent.kind === "underpriced") {
    // Its fee is below the block's base fee now: it waits (and bumps, up to the ceiling), never dropped.
    options.logger.debug({ id: row.id, reason: sent.message }, "transaction below the base fee; waiting");
    if (row.raw_tx !== null && parseTransaction(row.raw_tx).maxFeePerGas === options.maxFeePerGas)
      await holdForFee(options, row);
  } else if (sent.kind === "refused") {
    // A row replaced before (a crash after its replacement was recorded): an earlier transaction may
    // still be pending, so the refusal of these bytes does not drop it.
    if (row.replaced_hashes.length === 0) return outcomes.refuse(row, sent.message);
    options.logger.warn(
      { id: row.id, reason: sent.message },
      "the node refused a replaced transaction; waiting",
    );
  }
  options.hashWaiters.settle(row.id, (w) => w.resolve({ id: row.id, hash: row.tx_hash!, nonce: row.nonce! }));
  await options.faults?.afterBroadcast?.(row);
  const early = await earlyReceipt(options, row.tx_hash, () => markBroadcast(store, row.id));
  if (early !== undefined) return outcomes.finish(row, outcomes.outcomeOf(row, early));
  const { row: latest, receipt } = await awaitReceipt(options, row);
  return outcomes.finish(latest, outcomes.outcomeOf(latest, receipt));
}

/** The node says the row's nonce is used: by the row itself (its receipt), or by another transaction. */
async function displaced(options: RowDriverOptions, outcomes: RowOutcomes, row: OutboxRow): Promise<void> {
  const receipt = await findRowReceipt(options.client, row);
  if (receipt !== undefined) return outcomes.finish(row, outcomes.outcomeOf(row, receipt));
  options.key.nonces.resync();
  return outcomes.finish(row, {
    ...outcomeBase(row),
    status: "dropped",
    reason: "displaced",
    message: "another transaction took this transaction's account nonce",
    hash: null,
  });
}
