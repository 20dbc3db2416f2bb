/**
 * Every `tollgate` command answers `--help` and `-h` with its usage and exit code 0, as its own
 * process, and does nothing else: no devnet, no demo, no server, no file written. The command list is
 * read the way `main.ts` reads it, so a new command is covered without touching this test.
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type CliResult, runCli } from "../../test/support/runCli.ts";

const commands = readdirSync(new URL("./commands/", import.meta.url))
  .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
  .map((file) => file.slice(0, -3))
  .sort();

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

// About 35 processes, each loading its command through the TypeScript loader: minutes on a loaded
// two-core machine. A command that ran instead of printing its usage (the demo) fails its checks.
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

  it("answers --help and -h for every command with its usage, exit 0, and no side effects", async () => {
    const runs = commands.flatMap((name) => [
      [name, "--help"],
      [name, "-h"],
    ]);
    const results = await inBatches(runs, 3, async (args) => ({ args, result: await help(args) }));
    for (const { args, result } of results) {
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 0, stderr: "" });
      expect(result.stdout, args.join(" ")).toMatch(new RegExp(`^usage: tollgate ${args[0]}\\b`));
    }
    // `tollgate demo --help` printed its usage instead of running the demo.
    const demo = results.find((r) => r.args[0] === "demo")!.result;
    expect(demo.stdout).not.toContain("Spend report");
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("answers --help after a subcommand too, without running it", async () => {
    const results = await inBatches(subcommands, 3, async (args) => ({
      args,
      result: await help([...args, "--help"]),
    }));
    for (const { args, result } of results) {
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 0, stderr: "" });
      expect(result.stdout, args.join(" ")).toMatch(new RegExp(`^usage: tollgate ${args[0]}\\b`));
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
