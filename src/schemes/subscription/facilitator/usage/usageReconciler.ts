/**
 * Drives a usage settler's open batches to their outcome: those queued in the outbox are waited for,
 * those recorded by an older version (signed into `usage_batches` itself) are adopted by the outbox,
 * and those claimed but never queued (a crash between claim and queueing) release their records once
 * no worker has touched them for `abandonedAfterMs` (invariant 4 of usageSettler.ts).
 *
 * State: when the next unqueued batch may be released (`releaseDueInMs`), so the loop looks again
 * then, also when nothing else wakes it.
 */
import { type Address, keccak256, parseTransaction } from "viem";
import { insertSignedRow } from "../../../../facilitator/outbox/outboxRecords.ts";
import type { Outbox } from "../../../../facilitator/outbox/outboxTypes.ts";
import type { Store } from "../../../../store/store.ts";
import {
  batchStatusCounts,
  findUsageBatch,
  openUsageBatches,
  releaseUnqueuedBatch,
  USAGE_KIND,
  type UsageBatchScope,
} from "./usageBatchRecords.ts";
import type { UsageBatchRow } from "./usageRecords.ts";

export type UsageRunResult = { batches: number; settled: number; failed: number };

/** Adds `part` into `total`. */
export function addRun(total: UsageRunResult, part: UsageRunResult): void {
  total.batches += part.batches;
  total.settled += part.settled;
  total.failed += part.failed;
}

export type UsageReconcilerDeps = {
  store: Store;
  outbox: Outbox;
  scope: UsageBatchScope;
  /** The gas account's address, the outbox row's sender. */
  sender: Address;
  abandonedAfterMs: number;
};

export type UsageReconciler = ReturnType<typeof createUsageReconciler>;

export function createUsageReconciler(deps: UsageReconcilerDeps) {
  /** When a claimed batch left unqueued (another instance's, or a dead one's) may be released, if any. */
  let releaseDueInMs: number | undefined;

  /**
   * Open batches: those never queued (a crash between claim and queueing) release their records; those
   * recorded by an older version (signed into `usage_batches` itself) are adopted by the outbox; the
   * rest are waited for. Not serialized: the settler runs it in its queue.
   */
  async function reconcile(): Promise<UsageRunResult> {
    const total: UsageRunResult = { batches: 0, settled: 0, failed: 0 };
    releaseDueInMs = undefined;
    for (const batch of await openUsageBatches(deps.store, deps.scope)) {
      const batchId = Number(batch.id);
      if (batch.outbox_id !== null) {
        addRun(total, await usageOutcomeOf(deps, batchId, Number(batch.outbox_id)));
        continue;
      }
      if (batch.raw_tx !== null) {
        const part = await adopted(deps, batchId);
        if (part !== undefined) {
          addRun(total, part);
          continue;
        }
      }
      // Claimed and not queued: another instance of this gas key may be checking it right now, so only a
      // batch idle for `abandonedAfterMs` is released, and only while it is still unqueued (the compare-
      // and-set its queueing also makes). Nothing of it can have been broadcast.
      const dueInMs = deps.abandonedAfterMs - Number(batch.idle_ms);
      if (dueInMs > 0) {
        // Looked at again once it may be released, also when nothing else wakes this loop.
        releaseDueInMs = Math.min(releaseDueInMs ?? dueInMs, dueInMs);
        continue;
      }
      await releaseUnqueuedBatch(deps.store, batchId);
    }
    return total;
  }

  return {
    reconcile,
    outcomeOf: (batchId: number, outboxId: number) => usageOutcomeOf(deps, batchId, outboxId),
    /** When the earliest unqueued batch seen by the last `reconcile` may be released, if any. */
    releaseDueInMs: (): number | undefined => releaseDueInMs,
  };
}

/** Waits for a queued batch's outcome and counts what it recorded. */
async function usageOutcomeOf(
  deps: Pick<UsageReconcilerDeps, "store" | "outbox">,
  batchId: number,
  outboxId: number,
): Promise<UsageRunResult> {
  const outcome = await deps.outbox.waitFor(outboxId);
  const count = await batchStatusCounts(deps.store, batchId);
  return {
    batches: outcome.status === "dropped" ? 0 : 1,
    settled: count("settled"),
    failed: outcome.status === "confirmed" ? count("failed") : 0,
  };
}

/** A batch signed by an older version, adopted by the outbox and waited for; undefined if it vanished. */
async function adopted(deps: UsageReconcilerDeps, batchId: number): Promise<UsageRunResult | undefined> {
  const full = await findUsageBatch(deps.store, batchId);
  if (full === undefined) return undefined;
  const outboxId = await adoptSignedBatch(deps, full);
  return usageOutcomeOf(deps, batchId, outboxId);
}

/** Records a batch an older version signed into `usage_batches` as an outbox row, which then drives it. */
async function adoptSignedBatch(deps: UsageReconcilerDeps, batch: UsageBatchRow): Promise<number> {
  const raw = batch.raw_tx as `0x${string}`;
  const parsed = parseTransaction(raw);
  return deps.store.transaction(async (tx) => {
    const id = await insertSignedRow(
      tx,
      { chainId: deps.scope.chainId, sender: deps.sender },
      {
        kind: USAGE_KIND,
        owner: String(batch.id),
        to: parsed.to as Address,
        data: parsed.data ?? "0x",
        gas: parsed.gas ?? 0n,
        nonce: batch.sender_nonce ?? Number(parsed.nonce ?? 0),
        hash: keccak256(raw),
        raw,
        fromBlock: batch.from_block,
      },
    );
    await tx.query("UPDATE usage_batches SET outbox_id = $2 WHERE id = $1", [batch.id, id]);
    return id;
  });
}
