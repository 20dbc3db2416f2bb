/**
 * One lane for a statement that many requests make at once: a call runs at once when none is running,
 * and the calls made while one runs wait for it and then run together, as one call of `run` with all
 * their inputs (at most `maxBatch`). A lone request pays no wait; a burst of payments checked after a
 * block costs one statement per round instead of one each (docs/facilitator.md, "Settlement").
 *
 * Invariants:
 * - `run` answers its inputs in order, one output each; each caller gets its own.
 * - A failed run of several inputs is retried one input at a time, so an input that makes the
 *   statement fail (or a fault that passed) fails only its own caller, never the others of its round.
 * - At most one `run` of several inputs is in progress at a time (retries of a failed round run
 *   beside each other, one input each).
 */
export type Coalesced<I, O> = (input: I) => Promise<O>;

type Waiting<I, O> = { input: I; resolve: (output: O) => void; reject: (error: unknown) => void };

export function createCoalescer<I, O>(
  run: (inputs: readonly I[]) => Promise<readonly O[]>,
  options: { maxBatch?: number | undefined } = {},
): Coalesced<I, O> {
  const maxBatch = Math.max(1, options.maxBatch ?? 500);
  const queue: Waiting<I, O>[] = [];
  let running = false;

  async function runOne(call: Waiting<I, O>): Promise<void> {
    try {
      const [output] = await run([call.input]);
      call.resolve(output as O);
    } catch (error) {
      call.reject(error);
    }
  }

  async function runRound(calls: Waiting<I, O>[]): Promise<void> {
    if (calls.length === 1) return runOne(calls[0]!);
    let outputs: readonly O[];
    try {
      outputs = await run(calls.map((c) => c.input));
      if (outputs.length !== calls.length) {
        throw new Error(`a coalesced run answered ${outputs.length} of ${calls.length} inputs`);
      }
    } catch {
      await Promise.all(calls.map(runOne));
      return;
    }
    for (const [i, call] of calls.entries()) call.resolve(outputs[i] as O);
  }

  function pump(): void {
    if (running || queue.length === 0) return;
    running = true;
    void runRound(queue.splice(0, maxBatch)).finally(() => {
      running = false;
      pump();
    });
  }

  return (input) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ input, resolve, reject });
      pump();
    });
}
