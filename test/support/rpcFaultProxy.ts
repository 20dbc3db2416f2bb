/**
 * A loopback JSON-RPC proxy in front of a real node that behaves like the providers a facilitator meets
 * on a live network: it refuses `eth_getLogs` ranges wider than a cap the way they do, answers HTTP 429 or
 * 503 to a share of requests, reports a head that lags the node's, holds requests unanswered (a hung
 * provider), and refuses WebSocket upgrades as an HTTP-only provider does. Everything else is passed
 * through.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";

export type RpcFaults = {
  /** `eth_getLogs` spanning more blocks than this (inclusive) is refused with -32005. */
  maxLogsRange?: number | undefined;
  /** How the refusal reads: an RPC error (most providers) or an HTTP 413 with a message. */
  refusal?: "rpc-error" | "http-413" | undefined;
  /** Every `n`th request is answered HTTP 429 (1: all of them). */
  rateLimitEvery?: number | undefined;
  /** The `Retry-After` header of a 429, in seconds. Default "0". */
  retryAfter?: string | undefined;
  /** Requests are held unanswered (until the faults change or the proxy closes). */
  hang?: boolean | undefined;
  /** Every request is answered HTTP 503. */
  unavailable?: boolean | undefined;
  /** `eth_blockNumber` reports this many blocks behind the node. */
  lagBlocks?: number | undefined;
};

export type RpcFaultProxy = {
  url: string;
  /** Changes the faults from the next request on. */
  set(faults: RpcFaults): void;
  /** Requests seen, by JSON-RPC method (a batch counts each of its calls). */
  calls: Map<string, number>;
  /** `eth_getLogs` calls refused for their range. */
  refusedRanges(): number;
  /** HTTP requests answered 429. */
  rateLimited(): number;
  /** WebSocket upgrades asked for (each refused with HTTP 404). */
  webSocketAttempts(): number;
  close(): Promise<void>;
};

type RpcCall = { jsonrpc: "2.0"; id: unknown; method: string; params?: unknown[] };

export async function startRpcFaultProxy(target: string, initial: RpcFaults = {}): Promise<RpcFaultProxy> {
  let faults = initial;
  let requests = 0;
  let refused = 0;
  let limited = 0;
  let upgrades = 0;
  /** Requests held by `hang`, answered 503 when the faults change. */
  const held = new Set<() => void>();
  const calls = new Map<string, number>();

  async function forward(call: RpcCall): Promise<unknown> {
    const response = await fetch(target, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(call),
    });
    return response.json();
  }

  /** One call's answer, or an HTTP status to answer the whole request with. */
  async function answer(call: RpcCall): Promise<unknown | { httpStatus: number; text: string }> {
    if (call.method === "eth_getLogs" && faults.maxLogsRange !== undefined) {
      const filter = (call.params?.[0] ?? {}) as { fromBlock?: string; toBlock?: string; blockHash?: string };
      if (filter.blockHash === undefined) {
        const from = await blockOf(filter.fromBlock ?? "latest");
        const to = await blockOf(filter.toBlock ?? "latest");
        if (to - from + 1n > BigInt(faults.maxLogsRange)) {
          refused++;
          const message = `query exceeds max block range ${faults.maxLogsRange}`;
          if (faults.refusal === "http-413") return { httpStatus: 413, text: message };
          return { jsonrpc: "2.0", id: call.id, error: { code: -32005, message } };
        }
      }
    }
    if (call.method === "eth_blockNumber" && faults.lagBlocks !== undefined) {
      const reply = (await forward(call)) as { result?: string };
      if (reply.result === undefined) return reply;
      const lagged = BigInt(reply.result) - BigInt(faults.lagBlocks);
      return { ...reply, result: `0x${(lagged < 0n ? 0n : lagged).toString(16)}` };
    }
    return forward(call);
  }

  async function blockOf(tag: string): Promise<bigint> {
    if (tag.startsWith("0x")) return BigInt(tag);
    if (tag === "earliest") return 0n;
    const reply = (await forward({ jsonrpc: "2.0", id: 0, method: "eth_blockNumber", params: [] })) as {
      result: string;
    };
    return BigInt(reply.result);
  }

  const isHttp = (a: unknown): a is { httpStatus: number; text: string } =>
    typeof a === "object" && a !== null && "httpStatus" in a;

  const server: Server = createServer(async (req, res) => {
    try {
      const body = JSON.parse(await readBody(req)) as RpcCall | RpcCall[];
      requests++;
      for (const call of Array.isArray(body) ? body : [body])
        calls.set(call.method, (calls.get(call.method) ?? 0) + 1);
      if (faults.hang) {
        await new Promise<void>((resolve) => held.add(resolve));
        if (faults.hang) return;
        res.writeHead(503, { "content-type": "text/plain" }).end("service unavailable");
        return;
      }
      if (faults.unavailable) {
        res.writeHead(503, { "content-type": "text/plain" }).end("service unavailable");
        return;
      }
      if (faults.rateLimitEvery !== undefined && requests % faults.rateLimitEvery === 0) {
        limited++;
        res
          .writeHead(429, { "content-type": "text/plain", "retry-after": faults.retryAfter ?? "0" })
          .end("too many requests");
        return;
      }
      const answers = await Promise.all((Array.isArray(body) ? body : [body]).map(answer));
      const http = answers.find(isHttp);
      if (http !== undefined) {
        res.writeHead(http.httpStatus, { "content-type": "text/plain" }).end(http.text);
        return;
      }
      res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify(Array.isArray(body) ? answers : answers[0]));
    } catch (error) {
      res.writeHead(502, { "content-type": "text/plain" }).end(String(error));
    }
  });
  // An HTTP-only provider: an upgrade to WebSocket is answered 404 and the connection closed.
  server.on("upgrade", (_req, socket) => {
    upgrades++;
    socket.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = address !== null && typeof address === "object" ? address.port : 0;

  return {
    url: `http://127.0.0.1:${port}`,
    set(next) {
      faults = next;
      for (const release of held) release();
      held.clear();
    },
    calls,
    refusedRanges: () => refused,
    rateLimited: () => limited,
    webSocketAttempts: () => upgrades,
    close: () =>
      new Promise<void>((resolve) => {
        for (const release of held) release();
        held.clear();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      text += chunk;
    });
    req.on("end", () => resolve(text));
    req.on("error", reject);
  });
}
