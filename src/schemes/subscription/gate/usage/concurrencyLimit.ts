/**
 * A bound on work in flight: callers beyond it wait in the process, in arrival order, rather than on
 * a store's connections or locks.
 */
/** Runs at most `limit` of the functions given to it at once, the others in arrival order. */
export function concurrencyLimit(limit: number): <T>(run: () => Promise<T>) => Promise<T> {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async (run) => {
    if (active >= limit) await new Promise<void>((resolve) => waiting.push(resolve));
    else active++;
    try {
      return await run();
    } finally {
      const next = waiting.shift();
      if (next === undefined) active--;
      else next();
    }
  };
}
