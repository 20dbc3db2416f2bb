/**
 * The `tollgate` command. Each subcommand is a module `commands/<name>.ts` exporting `summary` and
 * `run(argv)`, loaded only when it runs (so `tollgate devnet up` does not pay for LangChain's import,
 * and `tollgate --help` reads the summaries from the files instead of importing every command).
 * Adding a command is adding a file.
 */
import { readdirSync, readFileSync } from "node:fs";
import { type CommandLoaders, type CommandSummaries, commandSummary, runCliProcess } from "./runCli.ts";

const commandsDir = new URL("./commands/", import.meta.url);
const files = readdirSync(commandsDir).filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"));

/** Every `commands/<name>.ts` (tests aside), loaded only when it runs. */
const commands: CommandLoaders = Object.fromEntries(
  files.map((file) => [file.slice(0, -3), () => import(new URL(file, commandsDir).href)]),
);

/** The summaries the usage lists, from the files' text (a dozen small reads, well under a millisecond). */
const summaries: CommandSummaries = Object.fromEntries(
  files.flatMap((file) => {
    const summary = commandSummary(readFileSync(new URL(file, commandsDir), "utf8"));
    return summary === undefined ? [] : [[file.slice(0, -3), summary]];
  }),
);

runCliProcess(process.argv.slice(2), commands, summaries);
