/**
 * `/authorize` callers waiting for their payment's outcome. A waiter is woken when this process records
 * the outcome, and looks at the store every 250 ms anyway: another instance may record it.
 */
import type { Clock } from "../../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import { findPaymentByNonce, type PaymentRow } from "../paymentRecords.ts";

export type OutcomeWaiters = {
  /** Wakes the waiters of a payment nonce. */
  notify(nonce: string): void;
  /** Waits until the row is settled or failed, or `timeoutMs` passes (then 503: it carries on). */
  waitForOutcome(row: PaymentRow, timeoutMs: number): Promise<PaymentRow>;
};

export function createOutcomeWaiters(deps: { store: Store; clock: Clock }): OutcomeWaiters {
  const waiters = new Map<string, Set<() => void>>();
  return {
    notify(nonce) {
      const set = waiters.get(nonce);
      if (set === undefined) return;
      waiters.delete(nonce);
      for (const fn of set) fn();
    },
    async waitForOutcome(row, timeoutMs) {
      let current = row;
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
        await new Promise<void>((resolve) => {
          let set = waiters.get(row.nonce);
          if (set === undefined) {
            set = new Set();
            waiters.set(row.nonce, set);
          }
          const done = () => {
            clearTimeout(timer);
            set?.delete(done);
            resolve();
          };
          const timer = setTimeout(done, Math.min(remaining, 250));
          set.add(done);
        });
        current = (await findPaymentByNonce(deps.store, row.nonce)) ?? current;
      }
      if (current.status === "failed") {
        throw new TollgateError(
          (current.failure_code as ErrorCode | null) ?? "InvalidRequest",
          current.failure_message ?? "the payment failed on chain",
          { details: { nonce: current.nonce } },
        );
      }
      return current;
    },
  };
}
