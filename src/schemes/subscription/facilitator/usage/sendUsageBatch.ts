/**
 * Sends a claimed usage batch: checks its records (usageBatchChecks.ts), then queues its
 * `deductAllowanceMany` call in the transaction outbox in the store transaction that marks the batch
 * submitted (invariant 2 of usageSettler.ts). Queueing and requeueing are each a compare-and-set on the
 * batch's `pending` status under its row lock, so a batch released meanwhile is neither (invariant 4).
 */
import type { Logger } from "pino";
import { deductAllowanceManyCall } from "../../../../chain/actions/subscriptions/deductAllowanceManyCall.ts";
import type { Outbox } from "../../../../facilitator/outbox/outboxTypes.ts";
import type { Store } from "../../../../store/store.ts";
import type { UsageBatchChecks } from "./usageBatchChecks.ts";
import {
  closeEmptyBatch,
  holdPending,
  markBatchQueued,
  requeueBatch,
  USAGE_KIND,
} from "./usageBatchRecords.ts";
import type { UsageBatchRow, UsageRow } from "./usageRecords.ts";

export type SendUsageBatchDeps = {
  store: Store;
  outbox: Outbox;
  checks: UsageBatchChecks;
  log: Logger;
};

/** What sending a batch did: the outbox row it queued, if any, and how many records failed unsent. */
export type SentUsageBatch = { outboxId?: number; failed: number };

export function createUsageBatchSender(deps: SendUsageBatchDeps) {
  const { store, outbox, checks, log } = deps;

  /** The records that pass the checks, with the gas their call needs (undefined: it would revert). */
  async function checked(
    batch: UsageBatchRow,
    claimed: UsageRow[],
  ): Promise<{ rows: UsageRow[]; gasLimit: bigint | undefined }> {
    let rows = await checks.dropUnknownTokens(batch.id, await checks.dropNonOperators(batch.id, claimed));
    let gasLimit = rows.length === 0 ? undefined : await checks.estimate(rows);
    if (gasLimit === undefined && rows.length > 1) {
      const reverting = await checks.revertingAlone(rows);
      if (reverting.length > 0 && reverting.length < rows.length) {
        await checks.failReverting(batch.id, reverting);
        rows = rows.filter((r) => !reverting.includes(r));
        gasLimit = await checks.estimate(rows);
      }
    }
    return { rows, gasLimit };
  }

  /**
   * The whole call would revert and no record is to blame alone (a caller fault such as an operator
   * revoked a moment ago, or records that revert only together): decode why, and retry the records a
   * bounded number of times.
   */
  async function requeueReverting(batch: UsageBatchRow, rows: UsageRow[]): Promise<void> {
    const error = new Error("the deduction batch would revert");
    const refusal = await checks.refusalOf(rows, error);
    log.warn(
      { batch: batch.id, code: refusal.code, err: error },
      "usage batch would revert; records requeued",
    );
    await store.transaction(async (tx) => {
      if (await holdPending(tx, batch.id, rows))
        await requeueBatch(tx, batch.id, refusal.code, refusal.message);
    });
  }

  /** Queues the batch's call in the outbox, if the batch is still pending with all of `rows`. */
  function enqueue(batch: UsageBatchRow, rows: UsageRow[], gasLimit: bigint): Promise<number | undefined> {
    const call = deductAllowanceManyCall({ ...checks.deduction(rows), gas: (gasLimit * 12n) / 10n });
    return store.transaction(async (tx) => {
      if (!(await holdPending(tx, batch.id, rows))) return undefined;
      const id = await outbox.enqueue(tx, { ...call, kind: USAGE_KIND, owner: String(batch.id) });
      await markBatchQueued(tx, batch.id, rows.length, id);
      return id;
    });
  }

  /** Checks a claimed batch and queues its transaction in the outbox; returns the outbox row, if any. */
  async function send(batch: UsageBatchRow, claimed: UsageRow[]): Promise<SentUsageBatch> {
    const { rows, gasLimit } = await checked(batch, claimed);
    const dropped = claimed.length - rows.length;
    if (rows.length === 0) {
      await closeEmptyBatch(store, batch.id);
      return { failed: dropped };
    }
    if (gasLimit === undefined) {
      await requeueReverting(batch, rows);
      return { failed: dropped };
    }
    const outboxId = await enqueue(batch, rows, gasLimit);
    if (outboxId === undefined) {
      log.warn({ batch: batch.id }, "usage batch was released while it was checked; not sent");
      return { failed: 0 };
    }
    outbox.wake();
    return { outboxId, failed: dropped };
  }

  return { send };
}
