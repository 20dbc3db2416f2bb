/**
 * Reads one line without echoing it: a password typed at a terminal. On a terminal, input is read in raw
 * mode and nothing typed is written back (not even asterisks, which would give away the length); from a
 * pipe, the first line is taken as it is. Ctrl-C or Ctrl-D before the end of the line rejects.
 */
import type { Readable, Writable } from "node:stream";
import { createLinePrompt } from "./promptLine.ts";

type TerminalInput = Readable & { isTTY?: boolean; setRawMode?(mode: boolean): unknown };

export function readSecretLine(input: TerminalInput, output: Writable, question: string): Promise<string> {
  if (input.isTTY !== true || input.setRawMode === undefined) {
    const prompt = createLinePrompt(input, output);
    return prompt.ask(question).finally(() => {
      prompt.close();
      output.write("\n");
    });
  }
  const setRawMode = input.setRawMode.bind(input);
  output.write(question);
  return new Promise((resolve, reject) => {
    let line = "";
    const finish = (error?: Error) => {
      input.removeListener("data", onData);
      setRawMode(false);
      input.pause();
      output.write("\n");
      if (error === undefined) resolve(line);
      else reject(error);
    };
    const onData = (chunk: Buffer) => {
      for (const char of chunk.toString("utf8")) {
        if (char === "\r" || char === "\n") return finish();
        if (char === "\u0003" || char === "\u0004") return finish(new Error("no password given"));
        if (char === "\u007f" || char === "\b") line = line.slice(0, -1);
        else line += char;
      }
    };
    setRawMode(true);
    input.resume();
    input.on("data", onData);
  });
}
