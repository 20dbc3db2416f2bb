import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { readSecretLine } from "./readSecretLine.ts";

/** A stream that answers like a terminal: `isTTY` and a raw mode that records its switches. */
function fakeTerminal() {
  const input = Object.assign(new PassThrough(), {
    isTTY: true,
    modes: [] as boolean[],
    setRawMode(mode: boolean) {
      input.modes.push(mode);
      return input;
    },
  });
  let written = "";
  const output = new PassThrough();
  output.on("data", (chunk: Buffer) => {
    written += chunk.toString();
  });
  return { input, output, written: () => written };
}

describe("readSecretLine", () => {
  it("reads a line typed at a terminal in raw mode, echoing nothing of it, and leaves raw mode", async () => {
    const { input, output, written } = fakeTerminal();
    const answer = readSecretLine(input, output, "password: ");
    input.write("hunter");
    input.write("3\u007f2\r");
    expect(await answer).toBe("hunter2");
    await new Promise((resolve) => setImmediate(resolve));
    expect(written()).toBe("password: \n");
    expect(input.modes).toEqual([true, false]);
  });

  it("rejects on Ctrl-C", async () => {
    const { input, output } = fakeTerminal();
    const answer = readSecretLine(input, output, "password: ");
    input.write("abc\u0003");
    await expect(answer).rejects.toThrow("no password given");
    expect(input.modes).toEqual([true, false]);
  });

  it("takes the first line of a pipe as it is", async () => {
    const input = new PassThrough();
    const output = new PassThrough();
    const answer = readSecretLine(input, output, "password: ");
    input.end("from a pipe\nrest\n");
    expect(await answer).toBe("from a pipe");
  });
});
