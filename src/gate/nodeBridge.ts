/**
 * What the Express and `node:http` adapters share: reading Node's request headers as the gate's
 * `GateRequest.headers`, writing the gate's web `Response` to a Node `ServerResponse`, and reporting
 * the handler's answer to the gate (`reportToGate`).
 */
import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import { eachGateHeader } from "./gatePass.ts";
import type { GateRequest } from "./gateRequest.ts";
import type { GateResult } from "./paymentGate.ts";

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

/**
 * A Node response whose writes are held back: the handler writes as usual, and nothing reaches the
 * client until `flush` sends what it wrote, or `discard` drops it (its status, headers and body) so
 * that another response can be written. What x402's Express middleware does to settle a payment
 * after the handler and before its answer leaves. The whole body is kept in memory until then.
 */
export type HeldResponse = {
  /**
   * The status the handler answered with once it ended the response; `CLIENT_GONE_STATUS` when the
   * connection closed first (nothing can be delivered then).
   */
  ended: Promise<number>;
  /** Sends the held writes, in order, and lets later ones through. */
  flush(): void;
  /** Drops the held writes and every header the handler set, and lets later writes through. */
  discard(): void;
};

/** What `HeldResponse.ended` reports for a client that went away before the handler answered. */
export const CLIENT_GONE_STATUS = 499;

type HeldCall = ["writeHead" | "write" | "end" | "flushHeaders", unknown[]];

/** Holds `res`'s writes (see `HeldResponse`). Call it before the handler runs. */
export function holdResponse(res: ServerResponse): HeldResponse {
  const original = {
    writeHead: res.writeHead,
    write: res.write,
    end: res.end,
    flushHeaders: res.flushHeaders,
  };
  let calls: HeldCall[] = [];
  let holding = true;
  let status: number | undefined;
  let resolveEnded: (status: number) => void = () => undefined;
  const ended = new Promise<number>((resolve) => {
    resolveEnded = resolve;
  });
  const restore = () => {
    holding = false;
    res.writeHead = original.writeHead;
    res.write = original.write;
    res.end = original.end;
    res.flushHeaders = original.flushHeaders;
  };
  // Own properties shadow the prototype's methods until `restore` puts the originals back.
  res.writeHead = ((...args: unknown[]) => {
    if (!holding) return (original.writeHead as (...a: unknown[]) => ServerResponse).apply(res, args);
    if (typeof args[0] === "number") status = args[0];
    calls.push(["writeHead", args]);
    return res;
  }) as ServerResponse["writeHead"];
  res.write = ((...args: unknown[]) => {
    if (!holding) return (original.write as (...a: unknown[]) => boolean).apply(res, args);
    calls.push(["write", args]);
    return true;
  }) as ServerResponse["write"];
  res.end = ((...args: unknown[]) => {
    if (!holding) return (original.end as (...a: unknown[]) => ServerResponse).apply(res, args);
    calls.push(["end", args]);
    resolveEnded(status ?? res.statusCode);
    return res;
  }) as ServerResponse["end"];
  res.flushHeaders = () => {
    if (!holding) return original.flushHeaders.call(res);
    calls.push(["flushHeaders", []]);
  };
  res.once("close", () => resolveEnded(CLIENT_GONE_STATUS));
  return {
    ended,
    flush() {
      const held = calls;
      calls = [];
      restore();
      for (const [method, args] of held) (original[method] as (...a: unknown[]) => unknown).apply(res, args);
    },
    discard() {
      calls = [];
      restore();
      for (const name of res.getHeaderNames()) res.removeHeader(name);
    },
  };
}

/**
 * Wires a passed request's report to the gate on its Node response; call it before the handler runs.
 * A payment settled after the handler (x402, `settleAfterHandler`) has the handler's answer held until
 * `complete` decided it: sent with the gate's headers, or replaced by the response `complete` answers
 * (the settlement failed). Any other pass gets the gate's headers now and reports the status the
 * response closes with (`close` follows `finish` and also fires for an aborted response; the gate
 * counts the first report). `onFault` gets a failure to write the held or replacing answer.
 */
export function reportToGate(
  res: ServerResponse,
  result: GateResult & { kind: "pass" },
  onFault: (error: unknown) => void,
): void {
  if (result.settleAfterHandler !== true) {
    eachGateHeader(result, (name, value) => res.setHeader(name, value));
    res.once("close", () => void result.complete(res.statusCode));
    return;
  }
  const held = holdResponse(res);
  held.ended
    .then(async (status) => {
      const instead = await result.complete(status);
      if (instead instanceof Response) {
        held.discard();
        return writeWebResponse(res, instead);
      }
      eachGateHeader(result, (name, value) => res.setHeader(name, value));
      held.flush();
    })
    .catch(onFault);
}
