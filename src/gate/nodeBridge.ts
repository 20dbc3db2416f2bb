/**
 * What the Express and `node:http` adapters share: reading Node's request headers as the gate's
 * `GateRequest.headers`, and writing the gate's web `Response` to a Node `ServerResponse`.
 */
import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import type { GateRequest } from "./paymentGate.ts";

/** `Headers.get` over Node's header object: repeated fields joined by ", " as the Fetch standard does. */
export function nodeHeaderReader(headers: IncomingHttpHeaders): GateRequest["headers"] {
  return {
    get(name) {
      const value = headers[name.toLowerCase()];
      if (value === undefined) return null;
      return Array.isArray(value) ? value.join(", ") : value;
    },
  };
}

/** Writes a web `Response` (a 402 or a gate fault) to a Node response. */
export async function writeWebResponse(res: ServerResponse, response: Response): Promise<void> {
  const body = Buffer.from(await response.arrayBuffer());
  const headers: Record<string, string> = {};
  for (const [name, value] of response.headers) headers[name] = value;
  headers["content-length"] = String(body.length);
  res.writeHead(response.status, headers);
  res.end(body);
}
