/**
 * The demo's progress for a run whose tool calls go on at once: each call's lines (its heading, what
 * it bought, what the reseller bought to serve it) are kept in the call's own block and printed
 * together when the call ends, so a purchase is never printed under another call's heading.
 *
 * A line is filed under the call whose tool invocation it comes from: each tool is wrapped so that its
 * invocation runs with the call's id in an AsyncLocalStorage, which the spend callbacks read.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { StructuredToolInterface } from "@langchain/core/tools";

export type CallBlocks = {
  /** The same tools, each invocation of which files its lines under its call. */
  wrap<T extends StructuredToolInterface>(tools: readonly T[]): T[];
  /** Opens a call's block with its heading. */
  start(callId: string, heading: string): void;
  /** Files a line under the call it comes from; printed at once outside any call. */
  line(text: string): void;
  /** Prints the call's block: its heading, then its lines. */
  end(callId: string): void;
};

export function createCallBlocks(print: (line: string) => void): CallBlocks {
  const current = new AsyncLocalStorage<string>();
  const blocks = new Map<string, string[]>();
  return {
    wrap: (tools) =>
      tools.map(
        (tool) =>
          new Proxy(tool, {
            get(target, property) {
              if (property === "invoke") {
                return (input: { id?: unknown }, config?: unknown) =>
                  current.run(String(input.id), () => target.invoke(input as never, config as never));
              }
              const value: unknown = Reflect.get(target, property, target);
              return typeof value === "function" ? value.bind(target) : value;
            },
          }),
      ),
    start(callId, heading) {
      blocks.set(callId, [heading]);
    },
    line(text) {
      const callId = current.getStore();
      const block = callId === undefined ? undefined : blocks.get(callId);
      if (block === undefined) print(text);
      else block.push(text);
    },
    end(callId) {
      for (const text of blocks.get(callId) ?? []) print(text);
      blocks.delete(callId);
    },
  };
}
