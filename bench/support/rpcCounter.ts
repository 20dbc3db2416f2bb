/**
 * Counts the JSON-RPC calls a viem transport makes, by method: pass `fetchFn` to `http(url, { fetchFn })`.
 * A JSON-RPC batch counts as one call per request in it, since that is what the node serves.
 */
export type RpcCounter = {
  fetchFn: typeof fetch;
  /** Total calls since the last reset. */
  readonly total: number;
  /** Calls by method since the last reset, most frequent first. */
  byMethod(): [method: string, calls: number][];
  reset(): void;
};

export function createRpcCounter(): RpcCounter {
  let counts = new Map<string, number>();
  const note = (method: unknown) => {
    const name = typeof method === "string" ? method : "?";
    counts.set(name, (counts.get(name) ?? 0) + 1);
  };
  return {
    fetchFn: (input, init) => {
      if (typeof init?.body === "string") {
        const body: unknown = JSON.parse(init.body);
        for (const call of Array.isArray(body) ? body : [body]) note((call as { method?: unknown }).method);
      }
      return fetch(input, init);
    },
    get total() {
      let sum = 0;
      for (const n of counts.values()) sum += n;
      return sum;
    },
    byMethod: () => [...counts].sort((a, b) => b[1] - a[1]),
    reset() {
      counts = new Map();
    },
  };
}
