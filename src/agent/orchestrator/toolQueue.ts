/**
 * Where the tool calls of one model turn wait for their turn (docs/agents.md): a run-wide concurrency
 * limit, and per seller a concurrency limit and a rate limit, through p-queue. Calls to different
 * sellers run side by side; a seller never sees more than its share at once, nor more than
 * `intervalCap` new calls per `intervalMs`, however many calls the model makes in one turn.
 *
 * The budget does not depend on the queue: the ledger's reserve is atomic (one transaction under the
 * agent's row lock), so calls running at once cannot together spend past a limit. The queue bounds
 * what a run costs sellers and the machine, not what it spends.
 */
import PQueue from "p-queue";
import { TollgateError } from "../../protocol/errors.ts";

export type ToolQueueOptions = {
  /** Calls running at once in the whole run (default 8). */
  concurrency?: number | undefined;
  /** Per seller: calls running at once (default 4). */
  perSellerConcurrency?: number | undefined;
  /** Per seller: at most this many calls start per `intervalMs` (default 10 per second). */
  perSellerRate?: { intervalCap: number; intervalMs: number } | undefined;
};

export type ToolQueue = {
  /**
   * Runs `task` when the run and the seller have room for it. `seller` is the key calls are limited
   * by: a paid tool's seller address, or the tool's name for a tool without one.
   */
  run<T>(seller: string, task: () => Promise<T>, signal?: AbortSignal | undefined): Promise<T>;
};

function positiveInt(value: number, what: string): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new TollgateError("InvalidRequest", `${what} must be a positive integer`);
  }
  return value;
}

/**
 * @example
 * const queue = createToolQueue({ perSellerConcurrency: 2 });
 * const message = await queue.run(seller, () => handler(request), signal);
 */
export function createToolQueue(options: ToolQueueOptions = {}): ToolQueue {
  const concurrency = positiveInt(options.concurrency ?? 8, "concurrency");
  const perSeller = positiveInt(options.perSellerConcurrency ?? 4, "perSellerConcurrency");
  const rate = options.perSellerRate ?? { intervalCap: 10, intervalMs: 1_000 };
  positiveInt(rate.intervalCap, "perSellerRate.intervalCap");
  positiveInt(rate.intervalMs, "perSellerRate.intervalMs");
  const all = new PQueue({ concurrency });
  const sellers = new Map<string, PQueue>();
  const sellerQueue = (seller: string) => {
    const key = seller.toLowerCase();
    let queue = sellers.get(key);
    if (queue === undefined) {
      queue = new PQueue({
        concurrency: perSeller,
        intervalCap: rate.intervalCap,
        interval: rate.intervalMs,
      });
      sellers.set(key, queue);
    }
    return queue;
  };
  return {
    run(seller, task, signal) {
      // The seller's slot first: a call waiting for its seller does not hold a run-wide slot that a
      // call to another seller could use.
      return sellerQueue(seller).add(() => all.add(task, { signal }), { signal }) as Promise<
        Awaited<ReturnType<typeof task>>
      >;
    },
  };
}
