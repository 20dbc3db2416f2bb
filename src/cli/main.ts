/**
 * The `tollgate` command. Each subcommand is a module `commands/<name>.ts` exporting `summary` and
 * `run(argv)`, loaded only when it runs (so `tollgate devnet up` does not pay for LangChain's import).
 * Adding a command is adding a file.
 */
import { readdirSync } from "node:fs";
import { TollgateError } from "../protocol/errors.ts";

export type CommandModule = { summary: string; run(argv: string[]): Promise<number> };

const commandsDir = new URL("./commands/", import.meta.url);

function commandNames(): string[] {
  return readdirSync(commandsDir)
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
    .map((file) => file.slice(0, -3))
    .sort();
}

async function load(name: string): Promise<CommandModule> {
  return (await import(new URL(`./${name}.ts`, commandsDir).href)) as CommandModule;
}

async function usage(): Promise<string> {
  const names = commandNames();
  const width = Math.max(...names.map((n) => n.length));
  const lines = await Promise.all(names.map(async (n) => `  ${n.padEnd(width)}  ${(await load(n)).summary}`));
  return ["usage: tollgate <command> [options]", "", "commands:", ...lines].join("\n");
}

/** What `node:util` `parseArgs` throws for a flag it does not know or a value it lacks. */
function isArgumentError(error: unknown): error is Error {
  return error instanceof Error && /^ERR_PARSE_ARGS_/.test(String((error as { code?: unknown }).code));
}

async function main(argv: string[]): Promise<number> {
  const [first, ...after] = argv;
  // `tollgate help <command>` is `tollgate <command> --help`.
  const [name, ...rest] = first === "help" && after[0] !== undefined ? [after[0], "--help"] : argv;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    console.log(await usage());
    return name === undefined ? 1 : 0;
  }
  if (!/^[a-z][a-z0-9-]*$/.test(name) || !commandNames().includes(name)) {
    console.error(`tollgate: unknown command "${name}"\n\n${await usage()}`);
    return 2;
  }
  try {
    return await (await load(name)).run(rest);
  } catch (error) {
    if (!isArgumentError(error)) throw error;
    console.error(`tollgate ${name}: ${error.message}\n(\`tollgate ${name} --help\` shows the options)`);
    return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof TollgateError) {
      console.error(`tollgate: ${error.code}: ${error.message}`);
    } else {
      console.error(error instanceof Error ? `tollgate: ${error.message}` : error);
    }
    // A command that failed may still hold timers or sockets it could not close: end here.
    process.exit(1);
  },
);
