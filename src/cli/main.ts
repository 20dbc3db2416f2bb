/**
 * The `tollgate` command. Each subcommand is a module `commands/<name>.ts` exporting `summary` and
 * `run(argv)`, loaded only when it runs (so `tollgate devnet up` does not pay for LangChain's import,
 * and `tollgate --help` reads the summaries from the files instead of importing every command).
 * Adding a command is adding a file.
 */
import { type CommandLoaders, commandNamesIn, readCommandSummaries, runCliProcess } from "./runCli.ts";

const commandsDir = new URL("./commands/", import.meta.url);
const names = commandNamesIn(commandsDir);

/** Every `commands/<name>.ts` (tests aside), loaded only when it runs. */
const commands: CommandLoaders = Object.fromEntries(
  names.map((name) => [name, () => import(new URL(`${name}.ts`, commandsDir).href)]),
);

runCliProcess(process.argv.slice(2), commands, readCommandSummaries(commandsDir, names));
