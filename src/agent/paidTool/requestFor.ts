import type { RemoteCapability } from "./paidToolTypes.ts";

/** The request of one call of `capability` with the model's `args` (query for GET/DELETE, else JSON). */
export function requestFor(capability: RemoteCapability, args: unknown): Request {
  const input = (args ?? {}) as Record<string, unknown>;
  if (capability.method === "GET" || capability.method === "DELETE") {
    const url = new URL(capability.url);
    for (const [key, value] of Object.entries(input)) {
      if (value !== undefined)
        url.searchParams.set(key, typeof value === "string" ? value : JSON.stringify(value));
    }
    return new Request(url, { method: capability.method });
  }
  return new Request(capability.url, {
    method: capability.method,
    headers: { "content-type": "application/json" },
    body: JSON.stringify(input),
  });
}
