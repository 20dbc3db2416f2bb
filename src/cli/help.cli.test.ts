/**
 * Every `tollgate` command answers `--help` and `-h` with its usage and exit code 0, as its own
 * process, and does nothing else: no devnet, no demo, no server, no file written. The command list is
 * read the way `main.ts` reads it, so a new command is covered without touching this test.
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { type CliResult, runCli } from "../../test/support/runCli.ts";
import { commandNamesIn } from "./runCli.ts";

const commands = commandNamesIn(new URL("./commands/", import.meta.url));

/** Subcommands asked for help: the usage is the command's, and nothing runs. */
const subcommands: string[][] = [
  ["devnet", "up"],
  ["devnet", "down"],
  ["plan", "create"],
  ["market", "search", "shout"],
  ["seller", "register", "http://127.0.0.1:9/"],
  ["seller", "refresh"],
  ["budget", "set", "researcher"],
  ["run", "Shout each document"],
  ["webhooks", "add", "https://example.com/hooks"],
  ["provider", "register"],
];

/** At most `limit` at once: each is a Node process with the TypeScript loader. */
async function inBatches<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += limit) {
    results.push(...(await Promise.all(items.slice(i, i + limit).map(work))));
  }
  return results;
}

// About 20 processes, each loading its command through the TypeScript loader: a minute or more on a
// loaded two-core machine. A command that ran instead of printing its usage (the demo) fails its checks.
describe("tollgate <command> --help", { timeout: 480_000 }, () => {
  // An empty working directory and Tollgate directory: any file a command wrote would show up here.
  const cwd = mkdtempSync(join(tmpdir(), "tollgate-help-"));
  const env = {
    TOLLGATE_DIR: join(cwd, "tollgate-dir"),
    // Nothing listens on port 9: a command that tried to reach a service would fail, not hang.
    TOLLGATE_FACILITATOR_URL: "http://127.0.0.1:9",
    TOLLGATE_MARKET_URL: "http://127.0.0.1:9",
  };
  const help = (args: string[]) => runCli(args, { cwd, env, timeoutMs: 120_000 });
  afterAll(() => rmSync(cwd, { recursive: true, force: true }));

  it("finds the commands", () => {
    expect(commands).toEqual(expect.arrayContaining(["demo", "devnet", "provider", "run", "seller"]));
  });

  it("answers --help for every command, as its own process, with its usage, exit 0, and no side effects", async () => {
    const results = await inBatches(commands, 3, async (name) => ({
      args: [name, "--help"],
      result: await help([name, "--help"]),
    }));
    for (const { args, result } of results) {
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 0, stderr: "" });
      expect(result.stdout, args.join(" ")).toMatch(new RegExp(`^usage: tollgate ${args[0]}\\b`));
    }
    // `tollgate demo --help` printed its usage instead of running the demo.
    const demo = results.find((r) => r.args[0] === "demo")!.result;
    expect(demo.stdout).not.toContain("Spend report");
    expect(readdirSync(cwd)).toEqual([]);
  });

  // What main.ts does after choosing the command is the command's own `run(argv)`: the short flag and
  // the subcommands' help are asked of it in this process (a process each would cost minutes).
  it("answers -h for every command, and --help after a subcommand, without running anything", async () => {
    const cases = [
      ...commands.map((name) => [name, "-h"]),
      ...subcommands.map((args) => [...args, "--help"]),
    ];
    const previous = Object.fromEntries(Object.keys(env).map((name) => [name, process.env[name]]));
    Object.assign(process.env, env);
    try {
      for (const [name, ...rest] of cases) {
        const printed: string[] = [];
        const errors: string[] = [];
        const log = vi.spyOn(console, "log").mockImplementation((...line: unknown[]) => {
          printed.push(line.join(" "));
        });
        const error = vi.spyOn(console, "error").mockImplementation((...line: unknown[]) => {
          errors.push(line.join(" "));
        });
        try {
          const command = (await import(`./commands/${name}.ts`)) as { run(argv: string[]): Promise<number> };
          const code = await command.run(rest);
          const args = [name, ...rest].join(" ");
          expect({ args, code, errors }).toEqual({ args, code: 0, errors: [] });
          expect(printed.join("\n"), args).toMatch(new RegExp(`^usage: tollgate ${name}\\b`));
        } finally {
          log.mockRestore();
          error.mockRestore();
        }
      }
    } finally {
      for (const [name, value] of Object.entries(previous)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("`tollgate help <command>` is `<command> --help`; an unknown flag names the command and its --help", async () => {
    const [viaHelp, direct, unknown] = (await Promise.all([
      help(["help", "provider"]),
      help(["provider", "--help"]),
      help(["provider", "register", "--bogus"]),
    ])) as [CliResult, CliResult, CliResult];
    expect(viaHelp.code).toBe(0);
    expect(viaHelp.stdout).toBe(direct.stdout);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("tollgate provider: Unknown option '--bogus'");
    expect(unknown.stderr).toContain("`tollgate provider --help`");
    expect(readdirSync(cwd)).toEqual([]);
  });
});
