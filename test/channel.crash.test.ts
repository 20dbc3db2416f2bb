/**
 * A gate SIGKILLed at the worst moments loses no voucher it served for (docs/channels.md, "Stores"):
 * its voucher journal is written before the handler runs, and a restarted gate recovers it and hands it
 * to the facilitator, which claims it on chain. The gate runs in a child process
 * (test/fixtures/channelGateProcess.ts) with a real facilitator and devnet.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
} from "./support/channelFixtures.ts";

const fixture = new URL("./fixtures/channelGateProcess.ts", import.meta.url).pathname;
const PRICE = 10_000n;

type GateProcess = {
  url: string;
  child: ChildProcess;
  lines: string[];
  waitFor(prefix: string): Promise<string>;
};

function startGate(config: Record<string, unknown>): Promise<GateProcess> {
  // `--import tsx` in this very process, not the tsx CLI (which runs the script in a grandchild a
  // SIGKILL would not reach).
  const child = spawn(process.execPath, ["--import", "tsx", fixture, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: string[] = [];
  const waiters: { prefix: string; resolve(line: string): void }[] = [];
  let buffer = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      lines.push(line);
      for (const w of waiters.splice(0)) {
        if (line.startsWith(w.prefix)) w.resolve(line);
        else waiters.push(w);
      }
    }
  });
  const waitFor = (prefix: string) =>
    new Promise<string>((resolve, reject) => {
      const seen = lines.find((l) => l.startsWith(prefix));
      if (seen !== undefined) return resolve(seen);
      waiters.push({ prefix, resolve });
      child.once("exit", (code) => reject(new Error(`gate exited (${code}) before printing ${prefix}`)));
    });
  return waitFor("listening ").then((line) => ({
    url: line.slice("listening ".length),
    child,
    lines,
    waitFor,
  }));
}

async function kill(gate: GateProcess): Promise<void> {
  if (gate.child.exitCode !== null || gate.child.signalCode !== null) return;
  const exited = new Promise((resolve) => gate.child.once("exit", resolve));
  gate.child.kill("SIGKILL");
  await exited;
}

describe("channel gate crashes", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-channel-crash-"));
  const gates: GateProcess[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    const gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: {
        claims: { thresholdValue: 1n, maxAgeMs: 3_600_000, intervalMs: 100 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 100 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 60_000);
  afterAll(async () => {
    for (const gate of gates) await kill(gate);
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const claimedOf = async (channelId: Hex) =>
    (await readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId })).claimed;
  async function untilClaimed(channelId: Hex, amount: bigint, ms = 20_000): Promise<bigint> {
    const end = Date.now() + ms;
    for (;;) {
      const claimed = await claimedOf(channelId);
      if (claimed >= amount || Date.now() > end) return claimed;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

  it("a gate killed after persisting a voucher and before answering, and one killed after answering and before forwarding, loses nothing", async () => {
    const config = {
      payTo: payee.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: server.url,
      apiKey,
      contract: devnet.contracts.channels,
      journal: join(dir, "vouchers.journal"),
      // Never on an interval here: only a restart's recovery forwards, so the test sees it does.
      forwardIntervalMs: 3_600_000,
      price: PRICE.toString(),
    };
    const wallet = createChannelWallet({
      account: payer.account,
      network: devnet.network,
      facilitator: createFacilitatorClient({ url: server.url, fetch }),
      calls: 100,
    });
    const paidFetch = createChannelFetch(fetch, { wallet, maxPrice: PRICE });
    const payeeBefore = await balance(payee.address);

    // Run 1: 20 answered calls, then one whose handler runs (voucher persisted) and the gate dies.
    const first = await startGate(config);
    gates.push(first);
    for (let i = 0; i < 20; i++) expect((await paidFetch(`${first.url}/api/item`)).status).toBe(200);
    const hung = paidFetch(`${first.url}/api/hang`).catch((error: unknown) => error);
    expect(await first.waitFor("handler ")).toBe(`handler ${21n * PRICE}`);
    await kill(first);
    expect(await hung).toBeInstanceOf(Error); // the payer never got an answer
    const channelId = wallet.channels()[0]!.channelId;
    expect(await claimedOf(channelId)).toBe(0n); // nothing was forwarded before the kill

    // Run 2 recovers all 21 vouchers from the journal and forwards them; the facilitator claims them.
    const second = await startGate(config);
    gates.push(second);
    expect(await untilClaimed(channelId, 21n * PRICE)).toBe(21n * PRICE);
    // The payer goes on from where it was; 5 answered calls, then the gate dies before forwarding them.
    for (let i = 0; i < 5; i++) expect((await paidFetch(`${second.url}/api/item`)).status).toBe(200);
    await kill(second);
    expect(await claimedOf(channelId)).toBe(21n * PRICE);

    // Run 3 recovers and forwards the last 5.
    const third = await startGate(config);
    gates.push(third);
    expect(await untilClaimed(channelId, 26n * PRICE)).toBe(26n * PRICE);
    expect(await balance(payee.address)).toBe(payeeBefore + 26n * PRICE);
    await kill(third);
  }, 120_000);
});
