/** The worker side of `runSocketLoad`: plain `node:http` with keep-alive, no framework in the way. */
import { Agent, request } from "node:http";
import { parentPort, workerData } from "node:worker_threads";
import type { SocketLoadOptions, SocketLoadResult } from "./socketLoad.ts";

const options = workerData as SocketLoadOptions;
const url = new URL(options.path, options.origin);
const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency });
const values = options.header?.values;

function once(headers: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      { agent, hostname: url.hostname, port: url.port, path: url.pathname, method: "GET", headers },
      (res) => {
        res.on("data", () => {});
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", () => resolve(0));
      },
    );
    req.on("error", () => resolve(0));
    req.end();
  });
}

const latenciesMs: number[] = [];
const statuses: Record<number, number> = {};
let next = 0;
const start = process.hrtime.bigint();
const deadline = start + BigInt(options.durationMs) * 1_000_000n;

async function connection(): Promise<void> {
  while (process.hrtime.bigint() < deadline) {
    const headers: Record<string, string> = {};
    if (values !== undefined && options.header !== undefined) {
      const value = values[next++];
      if (value === undefined) return;
      headers[options.header.name] = value;
    }
    const sent = process.hrtime.bigint();
    const status = await once(headers);
    latenciesMs.push(Number(process.hrtime.bigint() - sent) / 1e6);
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
}

await Promise.all(Array.from({ length: options.concurrency }, connection));
const result: SocketLoadResult = {
  count: latenciesMs.length,
  elapsedMs: Number(process.hrtime.bigint() - start) / 1e6,
  latenciesMs,
  statuses,
};
agent.destroy();
parentPort?.postMessage(result);
