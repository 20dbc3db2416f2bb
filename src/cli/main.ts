/**
 * The `tollgate` command. Each subcommand is a module `commands/<name>.ts` exporting `summary` and
 * `run(argv)`, loaded only when it runs (so `tollgate devnet up` does not pay for LangChain's import).
 * Adding a command is adding a file.
 */
import { readdirSync } from "node:fs";
import { type CommandLoaders, runCliProcess } from "./runCli.ts";

const commandsDir = new URL("./commands/", import.meta.url);

/** Every `commands/<name>.ts` (tests aside), loaded only when it runs. */
const commands: CommandLoaders = Object.fromEntries(
  readdirSync(commandsDir)
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
    .map((file) => [file.slice(0, -3), () => import(new URL(file, commandsDir).href)]),
);

runCliProcess(process.argv.slice(2), commands);
