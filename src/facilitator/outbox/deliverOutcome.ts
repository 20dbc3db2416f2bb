/**
 * Delivers a row's outcome to its producer's handler. The handler's `commit(apply)` runs `apply` in the
 * store transaction that moves the row to its final state (a compare-and-set on its status): exactly one
 * worker records an outcome, once. A handler that does not commit gets an empty commit after it returns.
 */
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable, Store } from "../../store/store.ts";
import { markFinal, type OutboxRow, recordFeePaid } from "./outboxRecords.ts";
import type { OutboxCommit, OutboxHandler, OutboxOutcome } from "./outboxTypes.ts";

export async function deliverOutcome(
  store: Store,
  handler: OutboxHandler,
  row: OutboxRow,
  outcome: OutboxOutcome,
  /** Further writes of the worker's own in the same transaction (a nonce filler, say). */
  alsoInTx?: (db: Queryable) => Promise<void>,
): Promise<void> {
  let committed = false;
  const commit: OutboxCommit = async (apply) => {
    if (committed) throw new TollgateError("Internal", "an outbox outcome was committed twice");
    committed = true;
    return store.transaction(async (tx) => {
      const won = await markFinal(tx, row.id, {
        status: outcome.status,
        hash: outcome.hash,
        blockNumber: outcome.status === "dropped" ? null : outcome.blockNumber,
        blockHash: outcome.status === "dropped" ? null : outcome.blockHash,
        failure: outcome.status === "dropped" ? `${outcome.reason}: ${outcome.message}` : null,
      });
      if (!won) return false;
      if (outcome.feePaid !== undefined) await recordFeePaid(tx, row.id, outcome.feePaid);
      await alsoInTx?.(tx);
      await apply(tx);
      return true;
    });
  };
  await handler(outcome, commit);
  if (!committed) await commit(async () => {});
}
