/**
 * The `tollgate` command line over a set of commands: usage, `help <command>`, argument errors and the
 * process's exit code. `main.ts` gives it the command files it finds beside it; the built CLI
 * (`npm run build`, docs/operations.md) gives it the same commands, bundled.
 */
import { readdirSync, readFileSync } from "node:fs";
import { TollgateError } from "../protocol/errors.ts";

export type CommandModule = { summary: string; run(argv: string[]): Promise<number> };

/** Command name → its module, imported only when that command runs. */
export type CommandLoaders = Readonly<Record<string, () => Promise<CommandModule>>>;

/** Command name → its `summary`, when known without importing the command (`commandSummary`). */
export type CommandSummaries = Readonly<Record<string, string>>;

/**
 * A command's `summary` read from its source, without running it: the string literal of
 * `export const summary = "…";`. `undefined` when the file writes it any other way (the usage then
 * imports that command, as it did for every command before).
 */
export function commandSummary(source: string): string | undefined {
  const literal = /^export const summary\s*=\s*("(?:[^"\\\n]|\\.)*")\s*;/m.exec(source)?.[1];
  if (literal === undefined) return undefined;
  try {
    return JSON.parse(literal) as string;
  } catch {
    return undefined;
  }
}

/** The commands in `dir` (a `file:` URL ending in `/`): every `<name>.ts` but tests, by name, sorted. */
export function commandNamesIn(dir: URL): string[] {
  return readdirSync(dir)
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".test.ts"))
    .map((file) => file.slice(0, -3))
    .sort();
}

/** The summaries `commandSummary` reads from the files of `names` in `dir` (a dozen small reads). */
export function readCommandSummaries(dir: URL, names: readonly string[]): CommandSummaries {
  return Object.fromEntries(
    names.flatMap((name) => {
      const summary = commandSummary(readFileSync(new URL(`${name}.ts`, dir), "utf8"));
      return summary === undefined ? [] : [[name, summary]];
    }),
  );
}

/** What `node:util` `parseArgs` throws for a flag it does not know or a value it lacks. */
function isArgumentError(error: unknown): error is Error {
  return error instanceof Error && /^ERR_PARSE_ARGS_/.test(String((error as { code?: unknown }).code));
}

async function usage(commands: CommandLoaders, summaries: CommandSummaries): Promise<string> {
  const names = Object.keys(commands).sort();
  const width = Math.max(...names.map((n) => n.length));
  // A command's module (and everything it imports: LangChain, PGlite…) is loaded here only when its
  // summary could not be read without it.
  const lines = await Promise.all(
    names.map(
      async (n) =>
        `  ${n.padEnd(width)}  ${Object.hasOwn(summaries, n) ? summaries[n] : (await commands[n]!()).summary}`,
    ),
  );
  return ["usage: tollgate <command> [options]", "", "commands:", ...lines].join("\n");
}

/** Runs one command line; resolves with the exit code. */
export async function runCli(
  argv: string[],
  commands: CommandLoaders,
  summaries: CommandSummaries = {},
): Promise<number> {
  const [first, ...after] = argv;
  // `tollgate help <command>` is `tollgate <command> --help`.
  const [name, ...rest] = first === "help" && after[0] !== undefined ? [after[0], "--help"] : argv;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    console.log(await usage(commands, summaries));
    return name === undefined ? 1 : 0;
  }
  const load = /^[a-z][a-z0-9-]*$/.test(name) && Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (load === undefined) {
    console.error(`tollgate: unknown command "${name}"\n\n${await usage(commands, summaries)}`);
    return 2;
  }
  try {
    return await (await load()).run(rest);
  } catch (error) {
    if (!isArgumentError(error)) throw error;
    console.error(`tollgate ${name}: ${error.message}\n(\`tollgate ${name} --help\` shows the options)`);
    return 2;
  }
}

/** Runs the command line as the process: sets its exit code, or ends it on an error nothing caught. */
export function runCliProcess(
  argv: string[],
  commands: CommandLoaders,
  summaries: CommandSummaries = {},
): void {
  runCli(argv, commands, summaries).then(
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
}
