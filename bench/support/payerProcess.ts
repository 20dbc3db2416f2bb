/**
 * The payers of `paidRequests.ts` in a process of their own: signing payments is work the paying
 * clients do, not the stacks under test, and with every payer in the bench process the stacks' servers
 * and their clients share one thread (each payment costing that thread ~50 ms on a slow core), so both
 * stacks sat at the same ceiling. Apart, the bench process holds the servers only and its CPU column is
 * the servers' cost per payment; the payer process reports its own.
 *
 * One payer process serves a whole mode (its clients stay built and warm between cells); it speaks over
 * Node's IPC channel: `setUp` builds a stack's paying fetches from its terms and the payers' keys,
 * `run` runs one cell's payers (payerLoop.ts) and answers what they measured.
 */
import { type ChildProcess, fork } from "node:child_process";
import type { Hex } from "viem";
import type { PayerLoopOptions, PayerRun } from "./payerLoop.ts";
import type { PayerSpec } from "./payingFetch.ts";

export type PayerRequest =
  | { id: number; type: "setUp"; stack: string; spec: PayerSpec; keys: Hex[] }
  | { id: number; type: "run"; stack: string; options: PayerLoopOptions };

export type PayerReply = { id: number; ok: true; run?: PayerRun } | { id: number; ok: false; error: string };

export type PayerProcess = {
  setUp(stack: string, spec: PayerSpec, keys: readonly Hex[]): Promise<void>;
  run(stack: string, options: PayerLoopOptions): Promise<PayerRun>;
  stop(): Promise<void>;
};

export function startPayerProcess(): PayerProcess {
  const child: ChildProcess = fork(new URL("./payerProcessMain.ts", import.meta.url), [], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let next = 0;
  const waiting = new Map<number, { resolve(reply: PayerReply): void; reject(error: Error): void }>();
  child.on("message", (reply: PayerReply) => {
    waiting.get(reply.id)?.resolve(reply);
    waiting.delete(reply.id);
  });
  child.once("exit", (code, signal) => {
    for (const w of waiting.values()) w.reject(new Error(`payer process exited (${code ?? signal})`));
    waiting.clear();
  });
  const ask = (request: PayerRequest extends infer R ? (R extends unknown ? Omit<R, "id"> : never) : never) =>
    new Promise<PayerReply>((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      child.send({ ...request, id });
    }).then((reply) => {
      if (!reply.ok) throw new Error(`payer process: ${reply.error}`);
      return reply;
    });
  return {
    async setUp(stack, spec, keys) {
      await ask({ type: "setUp", stack, spec, keys: [...keys] });
    },
    async run(stack, options) {
      const reply = await ask({ type: "run", stack, options });
      return reply.run!;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.disconnect();
      await exited;
    },
  };
}
