/**
 * The batches this settlement engine queued whose outcome is not recorded yet, with the rows each
 * claim wrote (handed to the batch's outcome, batchOutcome.ts, so they are not read again). The
 * batching rule reads how many there are; a batch leaves when its outcome commits here, or when a
 * look at the store finds it closed by another instance (`prune`).
 */
import type { Store } from "../../store/store.ts";
import type { PaymentRow } from "../paymentRecords.ts";
import type { ClaimedBatch } from "./batchClaims.ts";

export type InFlightBatches = {
  readonly size: number;
  /** A batch just claimed (counted by `onBatch`, the metrics' batch size). */
  add(claimed: ClaimedBatch): void;
  /** The rows the batch's claim wrote, once (later calls get `undefined`). */
  takeClaimedRows(batchId: number): PaymentRow[] | undefined;
  /** The batch's outcome is recorded. */
  forget(batchId: number): void;
  /** Forgets the batches whose outcome another instance (or a reconcile) recorded. */
  prune(): Promise<void>;
};

export function createInFlightBatches(deps: {
  store: Store;
  onBatch: (size: number) => void;
}): InFlightBatches {
  const ids = new Set<number>();
  const claimedRows = new Map<number, PaymentRow[]>();
  function forget(batchId: number): void {
    ids.delete(batchId);
    claimedRows.delete(batchId);
  }
  return {
    get size() {
      return ids.size;
    },
    add(claimed) {
      ids.add(claimed.batch.id);
      claimedRows.set(claimed.batch.id, claimed.rows);
      deps.onBatch(claimed.rows.length);
    },
    takeClaimedRows(batchId) {
      const rows = claimedRows.get(batchId);
      claimedRows.delete(batchId);
      return rows;
    },
    forget,
    async prune() {
      if (ids.size === 0) return;
      const open = await deps.store.query<{ id: string }>(
        "SELECT id FROM settlement_batches WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'submitted')",
        [[...ids].map(String)],
      );
      const still = new Set(open.map((r) => Number(r.id)));
      for (const id of ids) {
        if (!still.has(id)) forget(id);
      }
    },
  };
}
