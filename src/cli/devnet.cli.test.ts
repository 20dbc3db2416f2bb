/**
 * `tollgate devnet` as its own process: a port another node answers on is refused before anything
 * starts or is written, and the devnet lives in TOLLGATE_DIR like every other command's files.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { processesWith, runCli } from "../../test/support/runCli.ts";
import { startAnvil } from "../chain/startAnvil.ts";
import { DevnetFileSchema } from "./devnet.ts";

function freePort(): Promise<number> {
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

/** Another node on the port: answers any JSON-RPC call as chain 31337, and records the methods. */
async function otherNode(): Promise<{ server: Server; port: number; methods: string[] }> {
  const methods: string[] = [];
  const server = createHttpServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => {
      body += chunk.toString();
    });
    req.on("end", () => {
      const call = JSON.parse(body) as { id: number; method: string };
      methods.push(call.method);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: "0x7a69" }));
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const address = server.address();
  return { server, port: typeof address === "object" && address !== null ? address.port : 0, methods };
}

describe("tollgate devnet as a process", { timeout: 180_000 }, () => {
  const root = mkdtempSync(join(tmpdir(), "tollgate-devnet-cli-"));
  const servers: Server[] = [];
  afterAll(async () => {
    await runCli(["devnet", "down"], { env: { TOLLGATE_DIR: join(root, "owned") } });
    for (const server of servers) server.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("refuses a port another node answers on, deploys nothing and leaves nothing behind", async () => {
    const node = await otherNode();
    servers.push(node.server);
    const dir = join(root, "taken");
    // Left by a devnet that is gone: other commands would follow its RPC URL to the other node.
    mkdirSync(dir, { recursive: true });
    const gone = spawnSync(process.execPath, ["-e", ""]).pid;
    writeFileSync(
      join(dir, "devnet.json"),
      JSON.stringify({
        rpcUrl: `http://127.0.0.1:${node.port}`,
        chainId: 31337,
        network: "eip155:31337",
        pid: gone,
        contracts: {
          usd: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
          subscriptionManager: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
          batchSettler: "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9",
        },
        accounts: [],
      }),
      { mode: 0o600 },
    );
    const result = await runCli(["devnet", "up", "--port", String(node.port)], {
      env: { TOLLGATE_DIR: dir },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `port ${node.port} is in use (an Ethereum node answers there, chain id 31337)`,
    );
    expect(result.stderr).toContain("--port");
    expect(result.stdout).not.toContain("devnet up:");
    expect(result.stdout).toContain(`its devnet (pid ${gone}) is no longer running`);
    // Nothing was sent to the other node but the probe asking what it is.
    expect(node.methods).toEqual(["eth_chainId"]);
    expect(existsSync(join(dir, "devnet.json"))).toBe(false);
    expect(await processesWith("anvil", "--port", String(node.port))).toEqual([]);
  });

  it("keeps its devnet in TOLLGATE_DIR: up, status and down find it there", async () => {
    const dir = join(root, "owned");
    const port = await freePort();
    const env = { TOLLGATE_DIR: dir };
    const up = await runCli(["devnet", "up", "--port", String(port), "--accounts", "2"], { env });
    expect(up.stderr).toBe("");
    expect(up.code).toBe(0);
    const file = join(dir, "devnet.json");
    const devnet = DevnetFileSchema.parse(JSON.parse(readFileSync(file, "utf8")));
    expect(devnet.rpcUrl).toBe(`http://127.0.0.1:${port}`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(await processesWith("anvil", "--port", String(port))).toEqual([devnet.pid]);

    const status = await runCli(["devnet", "status"], { env });
    expect(status.code).toBe(0);
    expect(status.stdout).toContain(`devnet: http://127.0.0.1:${port} (pid ${devnet.pid})`);

    // The same port again: the running devnet is named, not mistaken for a stranger.
    const again = await runCli(["devnet", "up", "--port", String(port)], { env });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("a devnet is already running");

    const down = await runCli(["devnet", "down"], { env });
    expect(down.code).toBe(0);
    expect(existsSync(file)).toBe(false);
    expect(await processesWith("anvil", "--port", String(port))).toEqual([]);
  });
});

describe("startAnvil detached", () => {
  it("fails when its own anvil dies, even though another node answers on the port", async () => {
    const node = await otherNode();
    const dir = mkdtempSync(join(tmpdir(), "tollgate-anvil-"));
    try {
      await expect(
        startAnvil({ port: node.port, detachedLogFile: join(dir, "anvil.log"), startTimeoutMs: 20_000 }),
      ).rejects.toThrow(/anvil exited during start-up on port [0-9]+: .*(in use|Address)/i);
      expect(await processesWith("anvil", "--port", String(node.port))).toEqual([]);
    } finally {
      node.server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
