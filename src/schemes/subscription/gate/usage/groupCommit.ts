/**
 * Group commit for a store's writes: items added while a write is in flight go into the next one, so
 * a burst of them takes one connection and one round of locks per batch rather than one each.
 */
/**
 * Group commit: items added while a run of `write` is in flight go into the next run (at most
 * `maxBatch` each), one run at a time; each `add` settles with its run.
 */
export function groupCommit<T>(
  write: (items: T[]) => Promise<unknown>,
  maxBatch: number,
): (item: T) => Promise<void> {
  let queue: { item: T; resolve(): void; reject(error: unknown): void }[] = [];
  let running = false;
  const drain = async () => {
    while (queue.length > 0) {
      const batch = queue.slice(0, maxBatch);
      queue = queue.slice(maxBatch);
      try {
        await write(batch.map((entry) => entry.item));
        for (const entry of batch) entry.resolve();
      } catch (error) {
        for (const entry of batch) entry.reject(error);
      }
    }
    running = false;
  };
  return (item) =>
    new Promise<void>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      if (!running) {
        running = true;
        queueMicrotask(() => void drain());
      }
    });
}
