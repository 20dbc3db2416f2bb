/**
 * Questions answered one line at a time from a stream: a terminal, or a pipe standing in for one
 * (`tollgate run --approvals ask` with answers piped to stdin). Lines that arrive before their question
 * are kept for it, so a pipe written ahead of time answers in order. Closing stops reading, so a
 * command does not wait on stdin after it is done.
 */
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";

export type LinePrompt = {
  /** Writes the question and resolves with the next line (empty once the input has ended). */
  ask(question: string): Promise<string>;
  close(): void;
};

export function createLinePrompt(input: Readable, output: Writable): LinePrompt {
  let reader: ReturnType<typeof createInterface> | undefined;
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let ended = false;
  const open = () => {
    if (reader !== undefined) return;
    reader = createInterface({ input, terminal: false });
    reader.on("line", (line) => {
      const next = waiting.shift();
      if (next === undefined) lines.push(line);
      else next(line);
    });
    reader.on("close", () => {
      ended = true;
      for (const next of waiting.splice(0)) next("");
    });
  };
  return {
    ask(question) {
      open();
      output.write(question);
      const line = lines.shift();
      if (line !== undefined) return Promise.resolve(line);
      if (ended) return Promise.resolve("");
      return new Promise((resolve) => waiting.push(resolve));
    },
    close() {
      reader?.close();
    },
  };
}
