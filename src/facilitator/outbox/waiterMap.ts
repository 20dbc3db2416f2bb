/** Callers waiting on outbox rows, by row id: resolved or rejected all at once when the row moves. */
export type Waiter<T> = { resolve(value: T): void; reject(error: unknown): void };

export type WaiterMap<T> = {
  /** Adds a waiter; returns the function that removes it again. */
  add(id: number, waiter: Waiter<T>): () => void;
  /** Removes the row's waiters and calls `fn` for each. */
  settle(id: number, fn: (waiter: Waiter<T>) => void): void;
};

export function createWaiterMap<T>(): WaiterMap<T> {
  const map = new Map<number, Set<Waiter<T>>>();
  return {
    add(id, waiter) {
      let set = map.get(id);
      if (set === undefined) {
        set = new Set();
        map.set(id, set);
      }
      const own = set;
      own.add(waiter);
      return () => {
        own.delete(waiter);
        if (own.size === 0 && map.get(id) === own) map.delete(id);
      };
    },
    settle(id, fn) {
      const set = map.get(id);
      if (set === undefined) return;
      map.delete(id);
      for (const waiter of set) fn(waiter);
    },
  };
}
