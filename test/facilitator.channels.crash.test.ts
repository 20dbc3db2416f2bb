/**
 * Crash safety of channels (docs/channels.md): a facilitator process is SIGKILLed after broadcasting a
 * claim and before recording its outcome, then restarted on the same store: the vouchers are claimed
 * exactly once, checked against the chain and the event log. And a payer whose seller vanished gets its
 * unspent deposit back alone, after the close delay.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { requestChannelClose } from "../src/chain/actions/channels/requestChannelClose.ts";
import { withdrawChannel } from "../src/chain/actions/channels/withdrawChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { ChannelVouchersResponseSchema } from "../src/protocol/channels.ts";
import { EventFeedResponseSchema } from "../src/protocol/subscriptions.ts";
import { createStore } from "../src/store/createStore.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  type SignedTestOpen,
  signTestOpen,
  wireVoucher,
} from "./support/channelFixtures.ts";

const tsx = createRequire(import.meta.url).resolve("tsx/cli");
const fixture = new URL("./fixtures/channelFacilitatorProcess.ts", import.meta.url).pathname;

let devnet: Devnet;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
});

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await devnet?.stop();
});

type StoreConfig = { databaseUrl?: string; schema?: string; dataDir?: string };

/** A store that outlives one facilitator process: a PostgreSQL schema, or a PGlite directory. */
function durableStore(): StoreConfig {
  if (process.env.DATABASE_URL) {
    const config = {
      databaseUrl: process.env.DATABASE_URL,
      schema: `chcrash_${randomBytes(5).toString("hex")}`,
    };
    cleanups.push(async () => {
      const store = await createStore({ ...config, migrate: false });
      await store.dropSchema();
      await store.close();
    });
    return config;
  }
  const dataDir = mkdtempSync(join(tmpdir(), "tollgate-channel-crash-"));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  return { dataDir };
}

function startFacilitatorProcess(
  config: Record<string, unknown>,
): Promise<{ url: string; pid: number; child: ChildProcess }> {
  const child = spawn(process.execPath, [tsx, fixture], {
    env: { ...process.env, TOLLGATE_TEST_FACILITATOR: JSON.stringify(config) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let pid: number | undefined;
  cleanups.push(() => {
    // The facilitator runs under the tsx launcher: end both.
    if (pid !== undefined) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    let stdout = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /READY (\S+) (\d+)/.exec(stdout);
      if (match?.[1] !== undefined) {
        pid = Number(match[2]);
        resolve({ url: match[1], pid, child });
      }
    });
    child.once("exit", (code, signal) =>
      reject(new Error(`facilitator exited early (${code ?? signal}): ${stderr}`)),
    );
  });
}

function exited(child: ChildProcess): Promise<NodeJS.Signals | number | null> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve(child.signalCode ?? child.exitCode);
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve(signal ?? code)));
}

const post = (url: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
const balance = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
const chainState = (channelId: Hex) =>
  readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 120_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("channel crash safety", () => {
  it("claims exactly once when the facilitator is killed after sending a claim and before recording it", {
    timeout: 300_000,
  }, async () => {
    const [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    const gas = devnet.accounts[5]!;
    const storeConfig = durableStore();
    const config = {
      rpcUrl: devnet.rpcUrl,
      ...storeConfig,
      gasKey: gas.privateKey,
      proofKeySeed: generateProofKey().seed,
      batchSettler: devnet.contracts.batchSettler,
      channels: devnet.contracts.channels,
      usd: devnet.contracts.usd,
      crashAfterClaimBroadcast: true,
    };
    await nameChannelOperator(devnet, payee, gas.address);
    const first = await startFacilitatorProcess(config);
    const apiKey = await registerTestProvider(first.url, payee);
    const opened: SignedTestOpen[] = [];
    for (let i = 0; i < 3; i++) {
      const signed = await signTestOpen(devnet, payer, payee.address, { amount: 1_000_000n });
      expect((await post(first.url, "/channels", signed.body)).status).toBe(201);
      opened.push(signed);
    }
    const payeeBefore = await balance(payee.address);
    const death = exited(first.child);
    const handed = await post(
      first.url,
      "/channels/vouchers",
      { vouchers: opened.map((s, i) => wireVoucher(devnet, s.key, s.channelId, 100_000n * BigInt(i + 1))) },
      { authorization: `Bearer ${apiKey}` },
    );
    expect(ChannelVouchersResponseSchema.parse(await handed.json()).results.map((r) => r.status)).toEqual([
      "stored",
      "stored",
      "stored",
    ]);
    // The worker batches them into one claim, broadcasts it and dies before recording the outcome.
    expect(["SIGKILL", 137]).toContain(await death);
    // The claim landed on chain (automine) while its row and the channels still say "in flight".
    for (const [i, s] of opened.entries())
      expect((await chainState(s.channelId)).claimed).toBe(100_000n * BigInt(i + 1));
    const store = await createStore({ ...storeConfig, migrate: false });
    const inFlight = await store.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM channels WHERE claim_outbox_id IS NOT NULL",
    );
    expect(inFlight[0]?.n).toBe(3);
    await store.close();

    const second = await startFacilitatorProcess({ ...config, crashAfterClaimBroadcast: false });
    // The restarted outbox finds the broadcast row, reads its receipt and records the outcome once.
    const feed = await until(
      async () =>
        EventFeedResponseSchema.parse(
          await (
            await fetch(`${second.url}/events?types=channel.claimed`, {
              headers: { authorization: `Bearer ${apiKey}` },
            })
          ).json(),
        ).events,
      (events) => events.length >= 3,
    );
    expect(feed.map((e) => (e.data as { amount: string }).amount).sort()).toEqual([
      "100000",
      "200000",
      "300000",
    ]);
    // A few more rounds find nothing new to claim.
    await new Promise((r) => setTimeout(r, 500));
    const stopped = exited(second.child);
    process.kill(second.pid, "SIGTERM");
    await stopped;
    // Exactly once: one claim transaction, one channel.claimed event per channel, the payee paid once.
    const reopened = await createStore({ ...storeConfig, migrate: false });
    cleanups.push(() => reopened.close());
    const claims = await reopened.query<{ status: string }>(
      "SELECT status FROM tx_outbox WHERE kind = 'channel-claim' ORDER BY id",
    );
    expect(claims.map((c) => c.status)).toEqual(["confirmed"]);
    const events = await reopened.query<{ data: { amount: string } }>(
      "SELECT data FROM events WHERE type = 'channel.claimed' ORDER BY id",
    );
    expect(events).toHaveLength(3);
    const rows = await reopened.query<{ claimed: string; claim_outbox_id: string | null }>(
      "SELECT claimed::text, claim_outbox_id FROM channels ORDER BY claimed",
    );
    expect(rows).toEqual([
      { claimed: "100000", claim_outbox_id: null },
      { claimed: "200000", claim_outbox_id: null },
      { claimed: "300000", claim_outbox_id: null },
    ]);
    expect(await balance(payee.address)).toBe(payeeBefore + 600_000n);
  });

  it("returns the unspent deposit to a payer whose seller vanished, after the close delay, without the seller", {
    timeout: 180_000,
  }, async () => {
    const [, , , payer, payee] = devnet.accounts as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
    const gas = devnet.accounts[5]!;
    const storeConfig = durableStore();
    const facilitator = await startFacilitatorProcess({
      rpcUrl: devnet.rpcUrl,
      ...storeConfig,
      gasKey: gas.privateKey,
      proofKeySeed: generateProofKey().seed,
      batchSettler: devnet.contracts.batchSettler,
      channels: devnet.contracts.channels,
      usd: devnet.contracts.usd,
      crashAfterClaimBroadcast: false,
    });
    const signed = await signTestOpen(devnet, payer, payee.address, {
      amount: 3_000_000n,
      closeDelay: 7_200,
    });
    expect((await post(facilitator.url, "/channels", signed.body)).status).toBe(201);
    // The seller and its facilitator vanish: nothing was ever claimed.
    const gone = exited(facilitator.child);
    process.kill(facilitator.pid, "SIGKILL");
    await gone;
    const before = await balance(payer.address);
    const wallet = devnet.walletClient(payer);
    const channels = devnet.contracts.channels;
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await requestChannelClose(wallet, { channels, channelId: signed.channelId }),
    });
    await expect(withdrawChannel(wallet, { channels, channelId: signed.channelId })).rejects.toThrow(
      /CloseDelayNotOver/,
    );
    await devnet.advanceTime(7_200);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await withdrawChannel(wallet, { channels, channelId: signed.channelId }),
    });
    expect(await balance(payer.address)).toBe(before + 3_000_000n);
    expect(await chainState(signed.channelId)).toMatchObject({ closed: true, claimed: 0n });
  });
});
