/**
 * `/authorize` callers waiting for their payment's outcome. A waiter is woken when this process records
 * the outcome, and looks at the store every 250 ms anyway: another instance may record it. When this
 * process settled the payment, the settled row comes with the wake-up and is not read again.
 */
import type { Clock } from "../../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import { findPaymentByNonce, type PaymentRow } from "../paymentRecords.ts";

/** A payment this process saw settle: its row as committed, and the size of the batch it settled in. */
export type SettledOutcome = { row: PaymentRow; batchSize: number };

export type OutcomeWaiters = {
  /** Wakes the waiters of a payment nonce, with its settled row when this process just settled it. */
  notify(nonce: string, settled?: SettledOutcome): void;
  /**
   * Waits until the row is settled or failed, or `timeoutMs` passes (then 503: it carries on).
   * `batchSize` is known when the outcome came from this process.
   */
  waitForOutcome(row: PaymentRow, timeoutMs: number): Promise<{ row: PaymentRow; batchSize?: number }>;
};

export function createOutcomeWaiters(deps: { store: Store; clock: Clock }): OutcomeWaiters {
  const waiters = new Map<string, Set<(settled?: SettledOutcome) => void>>();
  return {
    notify(nonce, settled) {
      const set = waiters.get(nonce);
      if (set === undefined) return;
      waiters.delete(nonce);
      for (const fn of set) fn(settled);
    },
    async waitForOutcome(row, timeoutMs) {
      let current = row;
      let batchSize: number | undefined;
      const deadline = deps.clock.now() + timeoutMs;
      while (current.status !== "settled" && current.status !== "failed") {
        const remaining = deadline - deps.clock.now();
        if (remaining <= 0) {
          throw new TollgateError(
            "ChainUnavailable",
            "settlement is taking longer than expected; send the same payment again to get its outcome",
            { retryAfter: 5, details: { nonce: row.nonce, status: current.status } },
          );
        }
        const settled = await new Promise<SettledOutcome | undefined>((resolve) => {
          let set = waiters.get(row.nonce);
          if (set === undefined) {
            set = new Set();
            waiters.set(row.nonce, set);
          }
          const done = (outcome?: SettledOutcome) => {
            clearTimeout(timer);
            set?.delete(done);
            resolve(outcome);
          };
          const timer = setTimeout(done, Math.min(remaining, 250));
          set.add(done);
        });
        if (settled !== undefined) {
          current = settled.row;
          batchSize = settled.batchSize;
        } else {
          current = (await findPaymentByNonce(deps.store, row.nonce)) ?? current;
        }
      }
      if (current.status === "failed") {
        throw new TollgateError(
          (current.failure_code as ErrorCode | null) ?? "InvalidRequest",
          current.failure_message ?? "the payment failed on chain",
          { details: { nonce: current.nonce } },
        );
      }
      return batchSize === undefined ? { row: current } : { row: current, batchSize };
    },
  };
}
