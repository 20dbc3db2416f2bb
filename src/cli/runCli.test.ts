/**
 * `tollgate --help` lists every command's summary without importing the commands: the summaries are
 * read from the files' text (`commandSummary`), and each must be exactly what its module exports, or
 * the list would say something the command does not.
 */
import { describe, expect, it, vi } from "vitest";
import {
  type CommandLoaders,
  type CommandModule,
  commandNamesIn,
  commandSummary,
  readCommandSummaries,
  runCli,
} from "./runCli.ts";

const commandsDir = new URL("./commands/", import.meta.url);
const names = commandNamesIn(commandsDir);

describe("commandSummary", () => {
  it("reads every command's summary from its file exactly as its module exports it", async () => {
    expect(names.length).toBeGreaterThan(5);
    const read = readCommandSummaries(commandsDir, names);
    for (const name of names) {
      const module = (await import(new URL(`${name}.ts`, commandsDir).href)) as CommandModule;
      expect({ name, summary: read[name] }).toEqual({ name, summary: module.summary });
    }
  });

  it("reads a literal over several lines with escapes, and nothing it cannot be sure of", () => {
    expect(commandSummary('export const summary =\n  "say \\"hi\\" — twice";\n')).toBe('say "hi" — twice');
    expect(commandSummary("export const summary = `built`;")).toBeUndefined();
    expect(commandSummary('export const summary = "a" + "b";')).toBeUndefined();
    expect(commandSummary("export const summary = 'quoted';")).toBeUndefined();
    expect(commandSummary('// export const summary = "commented";')).toBeUndefined();
    expect(commandSummary('export const summary = "\\x41";')).toBeUndefined();
  });
});

describe("runCli usage", () => {
  const module = (summary: string): CommandModule => ({ summary, run: async () => 0 });

  it("lists the summaries it is given without loading those commands, and loads the rest", async () => {
    const loaded: string[] = [];
    const commands: CommandLoaders = {
      heavy: async () => {
        loaded.push("heavy");
        return module("never read");
      },
      plain: async () => {
        loaded.push("plain");
        return module("its own summary");
      },
    };
    const printed: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((line: unknown) => {
      printed.push(String(line));
    });
    try {
      expect(await runCli(["--help"], commands, { heavy: "read from its file" })).toBe(0);
    } finally {
      log.mockRestore();
    }
    expect(printed.join("\n")).toContain("heavy  read from its file");
    expect(printed.join("\n")).toContain("plain  its own summary");
    expect(loaded).toEqual(["plain"]);
  });
});
