import { AsyncLocalStorage } from "node:async_hooks";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";

/**
 * Tracks whether the current async context is inside one of this store's transactions, so that a
 * call on the store itself from within `transaction(fn)` fails loudly instead of deadlocking PGlite
 * (one connection, held by the transaction) or silently escaping the transaction on PostgreSQL.
 */
export function createTransactionScope() {
  // `open` flips to false when the transaction ends, so work that was started inside `fn` and
  // outlives it (a detached promise) may use the store again.
  const storage = new AsyncLocalStorage<{ open: boolean }>();
  return {
    run<T>(fn: () => Promise<T>): Promise<T> {
      const frame = { open: true };
      return storage.run(frame, () => fn().finally(() => (frame.open = false)));
    },
    assertOutside(operation: string): void {
      if (storage.getStore()?.open === true) {
        throw new TollgateError(
          ErrorCode.Internal,
          `store.${operation}() called inside store.transaction(); use the transaction's tx handle`,
        );
      }
    },
  };
}
