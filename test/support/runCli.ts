/**
 * Runs `tollgate` as its own process, the way a user does (`node --import tsx src/cli/main.ts …`),
 * and collects its exit code and output. The child's environment is exactly `env` plus PATH and
 * HOME, so a variable of the test machine (DATABASE_URL, TOLLGATE_API_KEY…) never leaks into a CLI
 * test by accident.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";

export type CliResult = { code: number | null; stdout: string; stderr: string };

const mainScript = join(import.meta.dirname, "../../src/cli/main.ts");
const repository = join(import.meta.dirname, "../..");
/** tsx's loader by absolute URL, so the child may run in any working directory. */
const tsxLoader = import.meta.resolve("tsx");

export function runCli(
  args: string[],
  options: { env?: Record<string, string | undefined>; cwd?: string; timeoutMs?: number } = {},
): Promise<CliResult> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" };
  for (const [name, value] of Object.entries(options.env ?? {})) if (value !== undefined) env[name] = value;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", tsxLoader, mainScript, ...args], {
      cwd: options.cwd ?? repository,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`tollgate ${args.join(" ")} did not end: ${stdout}${stderr}`));
    }, options.timeoutMs ?? 120_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Processes whose command line contains every one of `parts` (Linux `/proc`; empty elsewhere). */
export async function processesWith(...parts: string[]): Promise<number[]> {
  const { readdirSync, readFileSync } = await import("node:fs");
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const entry of entries) {
    if (!/^[0-9]+$/.test(entry)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" ");
    } catch {
      continue;
    }
    if (parts.every((part) => cmdline.includes(part))) found.push(Number(entry));
  }
  return found;
}
