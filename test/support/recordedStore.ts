import type { Queryable, Store } from "../../src/store/store.ts";

/** What `recordedStore` records where a store transaction begins. */
export const TRANSACTION_MARK = "-- transaction";

/**
 * The store, recording into `seen` every statement sent through it or its transactions, and
 * `TRANSACTION_MARK` where a transaction begins: for tests that count what a worker reads or writes.
 */
export function recordedStore(inner: Store, seen: string[]): Store {
  const watch = (db: Queryable): Queryable => ({
    query(sql, params) {
      seen.push(sql);
      return db.query(sql, params);
    },
    exec: (sql) => db.exec(sql),
  });
  return Object.assign(Object.create(inner) as Store, {
    query: watch(inner).query,
    transaction: <T>(fn: (tx: Queryable) => Promise<T>) =>
      inner.transaction((tx) => {
        seen.push(TRANSACTION_MARK);
        return fn(watch(tx));
      }),
  });
}
