/**
 * The renewal keeper's lease across instances (docs/reliability.md): an instance running the keeper
 * renews its lease while its run lasts, so another instance waits for it; once that instance is
 * SIGKILLed its lease expires within `leaseMs` of its last renewal and another instance runs the
 * renewals — not two minutes later. The holder is a real process (test/fixtures/keeperLeaseHolder.ts)
 * whose run hangs on an RPC that never answers; both keepers share one PostgreSQL schema.
 *
 * Needs DATABASE_URL (PostgreSQL): PGlite cannot be shared between processes.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { keeperOver } from "./support/keeperContext.ts";

const DATABASE_URL = process.env.DATABASE_URL;
const fixture = new URL("./fixtures/keeperLeaseHolder.ts", import.meta.url).pathname;
const LEASE_MS = 1_500;

let devnet: Devnet;
let store: Store;
/** An RPC endpoint that accepts connections and never answers. */
let silent: Server;
const sockets: Socket[] = [];
let holder: ChildProcess | undefined;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 2 });
  store = await createTestStore({ databaseUrl: DATABASE_URL });
  silent = createServer((socket) => void sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
}, 120_000);

afterAll(async () => {
  holder?.kill("SIGKILL");
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent?.close(resolve));
  await store?.close();
  await devnet?.stop();
});

const settings = () => ({
  gasKey: devnet.accounts[1]!.privateKey,
  manager: devnet.contracts.subscriptionManager,
  token: devnet.contracts.usd,
  tokenName: devnet.token.name,
  tokenVersion: devnet.token.version,
});

describe.skipIf(DATABASE_URL === undefined)("the renewal keeper's lease", () => {
  it("is kept by a live holder past its time to live, and taken over soon after the holder is SIGKILLed", async () => {
    const address = silent.address();
    const port = typeof address === "object" && address !== null ? address.port : 0;
    holder = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        fixture,
        JSON.stringify({
          ...settings(),
          rpcUrl: `http://127.0.0.1:${port}`,
          databaseUrl: DATABASE_URL,
          schema: store.schema,
          leaseMs: LEASE_MS,
        }),
      ],
      { stdio: ["ignore", "inherit", "inherit"] },
    );
    // The holder took the lease when its row appears.
    for (let i = 0; ; i++) {
      const rows = await store.query<{ holder: string }>("SELECT holder FROM worker_leases");
      if (rows.length === 1) break;
      if (i > 600) throw new Error("the holder process never took the lease");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const keeper = keeperOver(
      store,
      { ...settings(), rpcUrl: devnet.rpcUrl },
      // Waits four times the lease's life: without renewals the holder's lease would have expired.
      { leaseMs: LEASE_MS, waitForLeaseMs: 4 * LEASE_MS },
    );
    const blocked = await keeper.runOnce();
    expect(blocked.chainTime).toBe(0); // it never ran: the live holder kept renewing its lease

    const exited = new Promise((resolve) => holder!.once("exit", resolve));
    holder.kill("SIGKILL");
    await exited;
    // The dead holder's lease is still in the table; it expires within LEASE_MS and this run takes it.
    expect(await store.query("SELECT holder FROM worker_leases")).toHaveLength(1);
    const ran = await keeperOver(
      store,
      { ...settings(), rpcUrl: devnet.rpcUrl },
      { leaseMs: LEASE_MS, waitForLeaseMs: 60_000 },
    ).runOnce();
    expect(ran.chainTime).toBeGreaterThan(0);
    expect(await store.query("SELECT holder FROM worker_leases")).toHaveLength(0);
  }, 120_000);
});
