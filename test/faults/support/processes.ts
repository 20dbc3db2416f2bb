/**
 * Real processes of the fault suite and the soak: anvil keeping its chain in a state file across
 * restarts, `tollgate facilitator` instances spawned through the CLI on fixed ports (so a client's URL
 * list stays valid across restarts), and gate processes. Each handle restarts its process in place.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { resolveAnvilBinary } from "../../../src/chain/startAnvil.ts";

const repository = join(import.meta.dirname, "../../..");
const mainScript = join(repository, "src/cli/main.ts");
const tsxLoader = import.meta.resolve("tsx");
/**
 * With `TOLLGATE_FAULTS_LOGS=<dir>`, every process's whole output is appended to `<dir>/<name>.log`
 * (a handle keeps only its last lines), to read what an instance did during a run.
 */
const logDir = process.env.TOLLGATE_FAULTS_LOGS;
if (logDir !== undefined && logDir !== "") mkdirSync(logDir, { recursive: true });

/** A loopback port free right now (bound, read, released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** A process started again and again under one name; `child` is the current one. */
export type Restartable = {
  readonly name: string;
  child: ChildProcess | undefined;
  /** Starts the process; resolves once it says it is ready. */
  start(): Promise<void>;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Whether a process is running now (perhaps still starting). */
  running(): boolean;
  /** Whether the current process said it is ready and still runs. */
  ready(): boolean;
  /** Resident set size of the current process in KiB (Linux /proc), or undefined. */
  rssKiB(): number | undefined;
  /** The last lines the process wrote (stderr and stdout), for failure messages. */
  tail(): string;
  /** Exits nobody asked for (a crash of the process itself), each with its code and last output. */
  readonly unexpectedExits: string[];
};

/** Starts `handle` again until it comes up (a start may fail while the chain or the database is down). */
export async function startEventually(handle: Restartable, attempts = 30): Promise<void> {
  for (let i = 1; ; i++) {
    try {
      await handle.start();
      return;
    } catch (error) {
      process.stderr.write(`${handle.name}: start ${i} failed: ${String(error).slice(0, 400)}\n`);
      if (i >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  }
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/** Spawns `command args` with `env`; ready when `ready` matches its output. */
export function restartable(options: {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string>;
  ready: RegExp;
  startTimeoutMs?: number;
}): Restartable {
  let output = "";
  let readyChild: ChildProcess | undefined;
  const stopping = new WeakSet<ChildProcess>();
  const handle: Restartable = {
    unexpectedExits: [],
    ready: () => handle.running() && readyChild === handle.child,
    name: options.name,
    child: undefined,
    running: () =>
      handle.child !== undefined && handle.child.exitCode === null && handle.child.signalCode === null,
    start() {
      const child = spawn(options.command, options.args, {
        cwd: repository,
        env: { ...process.env, ...options.env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      handle.child = child;
      output = "";
      return new Promise<void>((resolve, reject) => {
        let ready = false;
        const timer = setTimeout(() => {
          child.kill("SIGKILL");
          reject(new Error(`${options.name} did not start: ${output.slice(-2000)}`));
        }, options.startTimeoutMs ?? 60_000);
        const onData = (chunk: Buffer) => {
          output = (output + chunk.toString()).slice(-20_000);
          if (logDir !== undefined && logDir !== "")
            appendFileSync(join(logDir, `${options.name}.log`), chunk);
          if (!ready && options.ready.test(output)) {
            ready = true;
            readyChild = child;
            clearTimeout(timer);
            resolve();
          }
        };
        child.stdout?.on("data", onData);
        child.stderr?.on("data", onData);
        child.once("exit", (code, signal) => {
          if (ready) {
            if (!stopping.has(child))
              handle.unexpectedExits.push(
                `${options.name} exited (${code ?? signal}): ${output.slice(-1500)}`,
              );
            return;
          }
          clearTimeout(timer);
          reject(
            new Error(`${options.name} exited during start (${code ?? signal}): ${output.slice(-2000)}`),
          );
        });
      });
    },
    async stop(signal = "SIGKILL") {
      const child = handle.child;
      if (child === undefined || !handle.running()) return;
      stopping.add(child);
      child.kill(signal);
      await exited(child);
    },
    rssKiB() {
      const pid = handle.child?.pid;
      if (pid === undefined || !handle.running()) return undefined;
      try {
        const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
        return match === null ? undefined : Number(match[1]);
      } catch {
        return undefined;
      }
    },
    tail: () => output.slice(-3000),
  };
  return handle;
}

/** anvil on a fixed port whose chain survives a restart: `--state` loads the file and dumps it on exit. */
export function statefulAnvil(options: { port: number; stateFile: string; accounts: number }): Restartable {
  return restartable({
    name: "anvil",
    command: resolveAnvilBinary(),
    args: [
      "--host",
      "127.0.0.1",
      "--port",
      String(options.port),
      "--accounts",
      String(options.accounts),
      "--state",
      options.stateFile,
      "--state-interval",
      "1",
    ],
    ready: /Listening on/,
  });
}

/** `tollgate facilitator` through the CLI, as an operator runs it, configured by environment only. */
export function facilitatorProcess(name: string, env: Record<string, string>): Restartable {
  return restartable({
    name,
    command: process.execPath,
    args: ["--import", tsxLoader, mainScript, "facilitator"],
    env,
    ready: /facilitator listening on/,
    // A `tsx` start of the CLI took over 60 s on the 2-core machine at a load average near 50.
    startTimeoutMs: 240_000,
  });
}

/** A gate process (test/faults/support/gateProcess.ts) with its JSON configuration. */
export function gateProcess(name: string, config: Record<string, unknown>): Restartable {
  return restartable({
    name,
    command: process.execPath,
    args: ["--import", tsxLoader, join(import.meta.dirname, "gateProcess.ts"), JSON.stringify(config)],
    ready: /listening http/,
  });
}
