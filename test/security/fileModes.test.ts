/**
 * File modes: Tollgate's files were once open to other users of the machine. PGlite wrote ~970
 * files mode 0666 under `.tollgate/` (the WAL among them), and the devnet file with its private keys was
 * world-readable. Every store and file Tollgate writes must be its owner's only: directories 0700,
 * files 0600 — including files PGlite creates while it runs, and directories an older version left
 * open.
 *
 * The modes are listed after real use: a store opened, written, closed and opened again; a devnet
 * started with `tollgate devnet up`.
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { devnetCommand } from "../../src/cli/devnet.ts";
import { agentDataDir, openAgentStore } from "../../src/cli/openAgentStore.ts";
import { createStore } from "../../src/store/createStore.ts";

let root: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "tollgate-modes-"));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** `path` and everything below it whose mode is not 0700 (directories) or 0600 (files). */
function loosePaths(path: string): string[] {
  const stat = lstatSync(path);
  const mode = stat.mode & 0o777;
  if (stat.isDirectory()) {
    const own = mode === 0o700 ? [] : [`${path} ${mode.toString(8)}`];
    return [...own, ...readdirSync(path).flatMap((name) => loosePaths(join(path, name)))];
  }
  return mode === 0o600 ? [] : [`${path} ${mode.toString(8)}`];
}

function countFiles(path: string): number {
  const stat = lstatSync(path);
  return stat.isDirectory() ? readdirSync(path).reduce((n, name) => n + countFiles(join(path, name)), 0) : 1;
}

async function useStore(dataDir: string, value: string): Promise<void> {
  const store = await createStore({ dataDir });
  try {
    await store.query("CREATE TABLE IF NOT EXISTS notes (body text)");
    // Enough to make PGlite write WAL and relation files beyond the ones initdb made.
    await store.query("INSERT INTO notes SELECT $1 || g FROM generate_series(1, 2000) g", [value]);
    expect(loosePaths(`${dataDir}.lock`)).toEqual([]);
  } finally {
    await store.close();
  }
}

describe("file modes of the embedded stores", () => {
  it("keeps a PGlite store private after real use: directories 0700 and files 0600, WAL included", async () => {
    const tollgateDir = join(root, "fresh", ".tollgate");
    const dataDir = join(tollgateDir, "pglite");
    await useStore(dataDir, "first run ");
    expect(countFiles(dataDir)).toBeGreaterThan(100);
    expect(loosePaths(tollgateDir)).toEqual([]);
    await useStore(dataDir, "second run ");
    expect(loosePaths(tollgateDir)).toEqual([]);
    expect(readdirSync(join(dataDir, "pg_wal")).length).toBeGreaterThan(0);
  }, 120_000);

  it("tightens a data directory an older version left readable by others when it opens it", async () => {
    const tollgateDir = join(root, "older", ".tollgate");
    const dataDir = join(tollgateDir, "pglite");
    await useStore(dataDir, "old ");
    // What an earlier version left behind.
    chmodSync(dataDir, 0o755);
    chmodSync(join(dataDir, "PG_VERSION"), 0o666);
    mkdirSync(join(dataDir, "stray"), { mode: 0o777 });
    chmodSync(join(dataDir, "stray"), 0o777);
    writeFileSync(join(dataDir, "stray", "leftover"), "x", { mode: 0o666 });
    chmodSync(join(dataDir, "stray", "leftover"), 0o666);
    expect(loosePaths(dataDir).length).toBeGreaterThan(0);

    const store = await createStore({ dataDir });
    try {
      // Tightened on open, before anything else is read or written.
      expect(loosePaths(dataDir)).toEqual([]);
    } finally {
      await store.close();
    }
  }, 120_000);

  it("keeps the agents' budget store private", async () => {
    const tollgateDir = join(root, "agents", ".tollgate");
    const store = await openAgentStore({ databaseUrl: undefined, dir: tollgateDir });
    try {
      await store.query("CREATE TABLE probe (x int)");
      await store.query("INSERT INTO probe SELECT generate_series(1, 1000)");
    } finally {
      await store.close();
    }
    expect(countFiles(agentDataDir(tollgateDir))).toBeGreaterThan(100);
    expect(loosePaths(tollgateDir)).toEqual([]);
  }, 120_000);
});

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

describe("file modes of the devnet", () => {
  it("writes devnet.json (with the accounts' keys) 0600 in a 0700 directory, and the anvil log 0600", async () => {
    const dir = join(root, "devnet", ".tollgate");
    const port = await freePort();
    const out = { log: () => {}, error: () => {} };
    expect(await devnetCommand(["up", "--dir", dir, "--port", String(port), "--accounts", "2"], out)).toBe(0);
    try {
      expect(readdirSync(dir).sort()).toEqual(["anvil.log", "devnet.json"]);
      expect(loosePaths(dir)).toEqual([]);
    } finally {
      expect(await devnetCommand(["down", "--dir", dir], out)).toBe(0);
    }
  });
});
