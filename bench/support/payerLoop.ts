/**
 * The paying side of `paidRequests.ts`: `concurrency` payers, each paying one request after another
 * until the cell's time is up (and at least `minRounds` times). The same loop runs in the bench process
 * (`--one-process`) or in a payer process of its own (payerProcess.ts), so both ways measure one thing.
 */
import type { FetchFn } from "../../src/http/facilitatorClient.ts";
import { TollgateError } from "../../src/protocol/errors.ts";
import { elapsedMs } from "./stats.ts";

export type PayerLoopOptions = {
  url: string;
  concurrency: number;
  /** Each payer keeps paying until this much time has passed… */
  budgetMs: number;
  /** …and has paid at least this many times. */
  minRounds: number;
};

export type PayerRun = {
  /** Latency of each successful paid request, first request to final 200, in milliseconds. */
  latenciesMs: number[];
  failed: number;
  /** Failures by reason. */
  failures: [string, number][];
  elapsedMs: number;
  /** CPU time of the process the payers ran in, during the run, in milliseconds. */
  cpuMs: number;
};

/** Why a paid request failed, in words short enough for a table. */
export async function failureOf(response: Response): Promise<string> {
  const x402 = response.headers.get("payment-response") ?? response.headers.get("payment-required");
  if (x402 !== null) {
    try {
      const decoded = JSON.parse(Buffer.from(x402, "base64").toString("utf8")) as {
        error?: string;
        errorReason?: string;
      };
      const reason = decoded.errorReason ?? decoded.error;
      if (reason !== undefined) return `HTTP ${response.status} ${reason}`;
    } catch {
      // Not an x402 header after all: fall through to the status.
    }
  }
  return `HTTP ${response.status}`;
}

export async function runPayers(
  payingFetch: (index: number) => FetchFn,
  options: PayerLoopOptions,
): Promise<PayerRun> {
  const failures = new Map<string, number>();
  const fail = (reason: string) => failures.set(reason, (failures.get(reason) ?? 0) + 1);
  const latenciesMs: number[] = [];
  let failed = 0;
  const cpuBefore = process.cpuUsage();
  const start = process.hrtime.bigint();
  const payer = async (index: number) => {
    const paidFetch = payingFetch(index);
    for (let round = 0; round < options.minRounds || elapsedMs(start) < options.budgetMs; round++) {
      const sent = process.hrtime.bigint();
      try {
        const response = await paidFetch(options.url);
        const body = await response.text();
        if (response.status === 200 && body.includes('"item":1')) {
          latenciesMs.push(elapsedMs(sent));
          continue;
        }
        fail(await failureOf(response));
      } catch (error) {
        fail(
          error instanceof TollgateError
            ? error.code
            : ((error as Error).message.split("\n")[0]?.slice(0, 60) ?? "error"),
        );
      }
      failed++;
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, (_, i) => payer(i)));
  const elapsed = elapsedMs(start);
  const cpu = process.cpuUsage(cpuBefore);
  return {
    latenciesMs,
    failed,
    failures: [...failures],
    elapsedMs: elapsed,
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
}
