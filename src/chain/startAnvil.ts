/**
 * Spawns an anvil node: the binary of the npm package `@foundry-rs/anvil` (its linux-x64 platform
 * package), or `anvil` on PATH on other platforms.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, fstatSync, openSync, readSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { openPrivateAppend } from "../store/privateFiles.ts";

export type AnvilLogger = { debug(message: string): void };

export type StartAnvilOptions = {
  /** Loopback port; 0 (default) lets the OS pick a free one. */
  port?: number | undefined;
  /** Seconds per block; by default anvil mines each transaction at once (automine). */
  blockTime?: number | undefined;
  /** Number of dev accounts anvil funds with ETH (default 10). */
  accounts?: number | undefined;
  /**
   * The chain id anvil reports (default 31337). Another id, such as Base Sepolia's 84532, rehearses a
   * network's configuration locally: code that picks defaults by chain id takes that network's.
   */
  chainId?: number | undefined;
  /**
   * The network family anvil imitates (`--network`): `optimism` accepts OP-stack deposit transactions
   * and formats blocks as an OP-stack node does. It deploys no predeploys: code at the GasPriceOracle's
   * address (0x42…0F) is the caller's to set (`anvil_setCode`).
   */
  network?: "ethereum" | "optimism" | undefined;
  /**
   * Run anvil in its own process group, writing its output to this file, and let it outlive this process
   * (the `devnet up` command). Needs an explicit `port`: readiness is then checked over RPC.
   */
  detachedLogFile?: string | undefined;
  /** Receives anvil's output lines; without one, anvil's output is discarded. */
  logger?: AnvilLogger | undefined;
  /** How long to wait for anvil to listen (ms, default 10 000). */
  startTimeoutMs?: number | undefined;
};

export type Anvil = {
  rpcUrl: string;
  port: number;
  pid: number;
  /** Stops anvil; idempotent. */
  stop(): Promise<void>;
};

/** The anvil executable: the npm platform package when installed, otherwise `anvil` on PATH. */
export function resolveAnvilBinary(): string {
  const require = createRequire(import.meta.url);
  try {
    const pkg = require.resolve("@foundry-rs/anvil-linux-amd64/package.json");
    const bin = join(dirname(pkg), "bin", "anvil");
    if (existsSync(bin)) return bin;
  } catch {
    // Not on linux-x64 (or the optional package is missing): use PATH.
  }
  return "anvil";
}

function anvilArgs(options: StartAnvilOptions): string[] {
  const args = ["--host", "127.0.0.1", "--port", String(options.port ?? 0)];
  args.push("--accounts", String(options.accounts ?? 10));
  if (options.chainId !== undefined) args.push("--chain-id", String(options.chainId));
  if (options.blockTime !== undefined) args.push("--block-time", String(options.blockTime));
  if (options.network !== undefined) args.push("--network", options.network);
  return args;
}

const listening = /Listening on ([0-9.]+):([0-9]+)/;

/**
 * Starts anvil on 127.0.0.1 and resolves once it listens. Unless detached, the node is killed when this
 * process exits.
 */
export function startAnvil(options: StartAnvilOptions = {}): Promise<Anvil> {
  if (options.detachedLogFile !== undefined) return startDetached(options, options.detachedLogFile);
  const child = spawn(resolveAnvilBinary(), anvilArgs(options), { stdio: ["ignore", "pipe", "pipe"] });
  const logger = options.logger;
  const timeoutMs = options.startTimeoutMs ?? 10_000;

  return new Promise<Anvil>((resolve, reject) => {
    let buffered = "";
    let settled = false;
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    const timer = setTimeout(() => fail(new Error(`anvil did not start within ${timeoutMs} ms`)), timeoutMs);
    child.once("error", (error) => fail(new Error(`cannot run anvil: ${error.message}`, { cause: error })));
    child.once("exit", (code) =>
      fail(new Error(`anvil exited during start-up (code ${code}): ${buffered.slice(-500)}`)),
    );
    child.stderr?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      logger?.debug(chunk.toString().trimEnd());
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      const text = chunk.toString();
      if (logger !== undefined)
        for (const line of text.split("\n")) if (line.trim() !== "") logger.debug(line);
      if (settled) return;
      buffered += text;
      const match = listening.exec(buffered);
      if (match === null) return;
      settled = true;
      clearTimeout(timer);
      buffered = "";
      const port = Number(match[2]);
      resolve(createHandle(child, port, false));
    });
  });
}

function createHandle(child: ChildProcess, port: number, detached: boolean): Anvil {
  const killOnExit = () => child.kill("SIGKILL");
  if (detached) {
    child.unref();
  } else {
    process.once("exit", killOnExit);
  }
  let stopping: Promise<void> | undefined;
  return {
    rpcUrl: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid ?? -1,
    stop() {
      stopping ??= new Promise<void>((resolve) => {
        process.removeListener("exit", killOnExit);
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      });
      return stopping;
    },
  };
}

async function startDetached(options: StartAnvilOptions, logFile: string): Promise<Anvil> {
  const port = options.port;
  if (port === undefined || port === 0) throw new Error("a detached anvil needs an explicit port");
  // Private like the rest of the Tollgate directory (src/store/privateFiles.ts).
  const fd = openPrivateAppend(logFile);
  // This start's output begins here: the log is appended to across starts.
  const offset = fstatSync(fd).size;
  const child = spawn(resolveAnvilBinary(), anvilArgs(options), {
    stdio: ["ignore", fd, fd],
    detached: true,
  });
  closeSync(fd);
  const rpcUrl = `http://127.0.0.1:${port}`;
  const attempts = Math.ceil((options.startTimeoutMs ?? 10_000) / 50);
  let exited = false;
  child.once("exit", () => {
    exited = true;
  });
  const output = () => readFrom(logFile, offset);
  for (let i = 0; i < attempts && !exited; i++) {
    // Ready only when this child said it listens and is still alive: another node on the port also
    // answers RPC, while this anvil is dying with "Address already in use".
    if (listening.test(output()) && (await answers(rpcUrl)) && !exited) {
      return createHandle(child, port, true);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill("SIGKILL");
  const tail = output().trim().split("\n").slice(-3).join(" | ");
  throw new Error(
    exited
      ? `anvil exited during start-up on port ${port}${tail === "" ? "" : `: ${tail}`} (see ${logFile})`
      : `anvil did not start on port ${port} (see ${logFile})`,
  );
}

/** What was appended to `file` after `offset` (at most 64 KiB of it: anvil's start-up is a few KiB). */
function readFrom(file: string, offset: number): string {
  const fd = openSync(file, "r");
  try {
    const length = Math.min(Math.max(fstatSync(fd).size - offset, 0), 65_536);
    const buffer = Buffer.alloc(length);
    const read = readSync(fd, buffer, 0, length, offset);
    return buffer.subarray(0, read).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

async function answers(rpcUrl: string): Promise<boolean> {
  try {
    const response = await fetch(rpcUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }),
    });
    return response.ok;
  } catch {
    return false;
  }
}
