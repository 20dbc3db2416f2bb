/**
 * A loopback JSON-RPC proxy in front of a real node that behaves like the providers a facilitator meets
 * on a live network: it refuses `eth_getLogs` ranges wider than a cap the way they do, answers HTTP 429 or
 * 503 to a share of requests, reports a head that lags the node's, serves a stale node's whole view
 * (`staleHead`), holds requests unanswered (a hung provider), and refuses WebSocket upgrades as an
 * HTTP-only provider does (or, with `webSocket: "pipe"`, pipes them to the node untouched: anvil serves
 * WebSocket on its HTTP port, and the faults are the HTTP side's). Everything else is passed through;
 * with no fault that rewrites calls, a request goes to the node as it came, in one piece (a JSON-RPC
 * batch stays one request).
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import { connect, type Socket } from "node:net";

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
  /**
   * A node stuck at this block, consistently: its head is this block, blocks, receipts and logs above
   * it do not exist yet (a transaction mined above it reads as pending), and state is read at it
   * (`latest`/`pending`/`safe`/`finalized` tags become this block). Transactions sent are passed on,
   * as a lagging node forwards them to the network.
   */
  staleHead?: bigint | undefined;
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
  /** WebSocket upgrades asked for (each refused with HTTP 404, unless piped). */
  webSocketAttempts(): number;
  close(): Promise<void>;
};

type RpcCall = { jsonrpc: "2.0"; id: unknown; method: string; params?: unknown[] };

export async function startRpcFaultProxy(
  target: string,
  initial: RpcFaults = {},
  options: {
    /** A WebSocket upgrade is refused (default, an HTTP-only provider) or piped to the node. */
    webSocket?: "refuse" | "pipe" | undefined;
  } = {},
): Promise<RpcFaultProxy> {
  let faults = initial;
  let requests = 0;
  let refused = 0;
  let limited = 0;
  let upgrades = 0;
  /** Requests held by `hang`, answered 503 when the faults change. */
  const held = new Set<() => void>();
  const calls = new Map<string, number>();

  async function forwardRaw(body: string): Promise<{ status: number; text: string }> {
    const response = await fetch(target, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    return { status: response.status, text: await response.text() };
  }

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
    if (faults.staleHead !== undefined) return stale(call, faults.staleHead);
    if (call.method === "eth_blockNumber" && faults.lagBlocks !== undefined) {
      const reply = (await forward(call)) as { result?: string };
      if (reply.result === undefined) return reply;
      const lagged = BigInt(reply.result) - BigInt(faults.lagBlocks);
      return { ...reply, result: `0x${(lagged < 0n ? 0n : lagged).toString(16)}` };
    }
    return forward(call);
  }

  /** A call answered as a node whose head is `head` would answer it. */
  async function stale(call: RpcCall, head: bigint): Promise<unknown> {
    const hex = `0x${head.toString(16)}`;
    const params = [...(call.params ?? [])];
    const reply = (result: unknown) => ({ jsonrpc: "2.0", id: call.id, result });
    /** A block tag at or below the stale head (a number above it is not known to this node). */
    const clamp = (tag: unknown) =>
      typeof tag !== "string" || !tag.startsWith("0x") ? hex : BigInt(tag) > head ? hex : tag;
    const above = (block: unknown) => typeof block === "string" && BigInt(block) > head;
    switch (call.method) {
      case "eth_blockNumber":
        return reply(hex);
      case "eth_getBlockByNumber": {
        const tag = params[0];
        if (typeof tag === "string" && tag.startsWith("0x") && BigInt(tag) > head) return reply(null);
        if (tag !== "earliest") params[0] = clamp(tag);
        return forward({ ...call, params });
      }
      case "eth_getBlockByHash": {
        const answer = (await forward(call)) as { result?: { number?: string } | null };
        return above(answer.result?.number) ? reply(null) : answer;
      }
      case "eth_getTransactionReceipt": {
        const answer = (await forward(call)) as { result?: { blockNumber?: string } | null };
        return above(answer.result?.blockNumber) ? reply(null) : answer;
      }
      case "eth_getTransactionByHash": {
        const answer = (await forward(call)) as { result?: Record<string, unknown> | null };
        if (answer.result === null || answer.result === undefined || !above(answer.result.blockNumber))
          return answer;
        return reply({ ...answer.result, blockHash: null, blockNumber: null, transactionIndex: null });
      }
      case "eth_getLogs": {
        const filter = { ...((params[0] ?? {}) as Record<string, unknown>) };
        if (filter.blockHash !== undefined) {
          const answer = (await forward(call)) as { result?: { blockNumber?: string }[] };
          return above(answer.result?.[0]?.blockNumber) ? reply([]) : answer;
        }
        if (above(filter.fromBlock)) return reply([]);
        filter.toBlock = clamp(filter.toBlock ?? "latest");
        return forward({ ...call, params: [filter] });
      }
      case "eth_call":
      case "eth_estimateGas":
      case "eth_createAccessList":
        params[1] = clamp(params[1]);
        return forward({ ...call, params });
      case "eth_getBalance":
      case "eth_getCode":
      case "eth_getTransactionCount":
        params[1] = clamp(params[1]);
        return forward({ ...call, params });
      case "eth_getStorageAt":
        params[2] = clamp(params[2]);
        return forward({ ...call, params });
      default:
        return forward(call);
    }
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

  /** Whether any fault rewrites or answers calls one by one (else the request is passed on whole). */
  const perCall = () =>
    faults.maxLogsRange !== undefined || faults.lagBlocks !== undefined || faults.staleHead !== undefined;

  const server: Server = createServer(async (req, res) => {
    try {
      const text = await readBody(req);
      const body = JSON.parse(text) as RpcCall | RpcCall[];
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
      if (!perCall()) {
        const passed = await forwardRaw(text);
        res.writeHead(passed.status, { "content-type": "application/json" }).end(passed.text);
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
  // An HTTP-only provider answers an upgrade to WebSocket 404 and closes the connection; with
  // `webSocket: "pipe"`, the upgrade request and everything after it are piped both ways to the node.
  const upgraded = new Set<Socket>();
  server.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) => {
    upgrades++;
    if (options.webSocket !== "pipe") {
      socket.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
      return;
    }
    const node = new URL(target);
    const upstream = connect(Number(node.port || 80), node.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
      for (let i = 0; i < req.rawHeaders.length; i += 2)
        lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
      if (head.length > 0) upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    for (const s of [socket, upstream]) {
      upgraded.add(s);
      s.on("error", () => {
        socket.destroy();
        upstream.destroy();
      });
      s.on("close", () => {
        upgraded.delete(s);
        socket.destroy();
        upstream.destroy();
      });
    }
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
        for (const socket of upgraded) socket.destroy();
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
