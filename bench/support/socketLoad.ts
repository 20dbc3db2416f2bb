/**
 * A small autocannon-like load generator: `concurrency` keep-alive connections, each sending its next
 * request as soon as the previous answer arrives, for `durationMs`. It runs in a worker thread so that
 * the client's own work does not share an event loop with the server it measures.
 */
import { Worker } from "node:worker_threads";

export type SocketLoadOptions = {
  /** Origin of the server, e.g. `http://127.0.0.1:4021`. */
  origin: string;
  path: string;
  concurrency: number;
  durationMs: number;
  /** Values for a request header, each sent once in order; the run ends early when they run out. */
  header?: { name: string; values: readonly string[] } | undefined;
};

export type SocketLoadResult = {
  /** Completed requests. */
  count: number;
  /** Wall time from the first request to the last answer, in milliseconds. */
  elapsedMs: number;
  /** Latency of each completed request, in milliseconds. */
  latenciesMs: number[];
  /** Completed requests by HTTP status; `0` counts transport errors. */
  statuses: Record<number, number>;
};

/** Runs one load phase in a fresh worker thread and resolves with what it measured. */
export function runSocketLoad(options: SocketLoadOptions): Promise<SocketLoadResult> {
  return new Promise((resolve, reject) => {
    // The worker is TypeScript too: a worker thread does not inherit tsx's loader, so it loads the
    // file through tsx's API.
    const file = new URL("./socketLoadWorker.ts", import.meta.url).href;
    const api = import.meta.resolve("tsx/esm/api");
    const boot = `import(${JSON.stringify(api)}).then((tsx) => tsx.tsImport(${JSON.stringify(file)}, ${JSON.stringify(import.meta.url)}))`;
    const worker = new Worker(boot, { eval: true, workerData: options });
    worker.once("message", (result: SocketLoadResult) => resolve(result));
    worker.once("error", reject);
    worker.once("exit", (code) => {
      if (code !== 0) reject(new Error(`load worker exited with ${code}`));
    });
  });
}
