/**
 * Crash safety of settlement (docs/facilitator.md, "Settlement: batching and crash safety"): a facilitator process is SIGKILLed between broadcasting a
 * batch and recording its outcome, then restarted on the same store; every payment must end settled
 * exactly once with its proof retrievable, checked against on-chain balances.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { PaymentProofSchema } from "../src/protocol/paymentProof.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { createStore } from "../src/store/createStore.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";
import { readPaymentAsPayer } from "./support/readPayment.ts";

// The loader in this process, not the tsx CLI: the CLI runs the script in a child of its own, which a
// SIGKILL of the CLI would leave running.
const tsxLoader = import.meta.resolve("tsx");
const fixture = new URL("./fixtures/facilitatorProcess.ts", import.meta.url).pathname;

let devnet: Devnet;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
});

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await devnet?.stop();
});

type StoreConfig = { databaseUrl?: string; schema?: string; dataDir?: string };

/** A store location that outlives one facilitator process: a PostgreSQL schema, or a PGlite directory. */
function durableStore(): StoreConfig {
  if (process.env.DATABASE_URL) {
    const config = {
      databaseUrl: process.env.DATABASE_URL,
      schema: `crash_${randomBytes(5).toString("hex")}`,
    };
    cleanups.push(async () => {
      const store = await createStore({ ...config, migrate: false });
      await store.dropSchema();
      await store.close();
    });
    return config;
  }
  const dataDir = mkdtempSync(join(tmpdir(), "tollgate-crash-"));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  return { dataDir };
}

function startFacilitatorProcess(
  config: Record<string, unknown>,
): Promise<{ url: string; child: ChildProcess; stdout: () => string }> {
  const child = spawn(process.execPath, ["--import", tsxLoader, fixture], {
    env: { ...process.env, TOLLGATE_TEST_FACILITATOR: JSON.stringify(config) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  cleanups.push(() => {
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
      const match = /READY (\S+)/.exec(stdout);
      if (match?.[1] !== undefined) resolve({ url: match[1], child, stdout: () => stdout });
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

function authorize(url: string, signedPayment: SignedPayment): Promise<Response> {
  return fetch(`${url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

async function balanceOf(owner: `0x${string}`): Promise<bigint> {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
}

async function freshPayers(count: number, usd: bigint): Promise<DevnetAccount[]> {
  const payers: DevnetAccount[] = [];
  for (let i = 0; i < count; i++) {
    const privateKey = generatePrivateKey();
    const account = privateKeyToAccount(privateKey);
    await devnet.fund(account.address, { usd });
    payers.push({ address: account.address, privateKey, account });
  }
  return payers;
}

/**
 * Polls `/payments/:nonce` until every payment the store knows of has an outcome; returns their
 * statuses. Payments the crashed process never recorded are absent (404) and left out.
 */
async function settleOnTheirOwn(
  url: string,
  payments: SignedPayment[],
  payers: DevnetAccount[],
): Promise<string[]> {
  for (let attempt = 0; ; attempt++) {
    const statuses: string[] = [];
    for (const [i, p] of payments.entries()) {
      // A payment is readable by its payer only (or its payee): each read is signed by the payer.
      const response = await readPaymentAsPayer(url, p.authorization.nonce, payers[i]!.account);
      if (response.status === 404) continue;
      statuses.push(((await response.json()) as { status: string }).status);
    }
    const open = statuses.some((s) => s !== "settled" && s !== "failed");
    if (!open || attempt >= 600) return statuses;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function runCrashScenario(options: { automine: boolean }) {
  const payTo = privateKeyToAccount(generatePrivateKey()).address;
  const gas = devnet.accounts[options.automine ? 2 : 3]!;
  const { seed } = generateProofKey();
  const base = {
    rpcUrl: devnet.rpcUrl,
    ...durableStore(),
    gasKey: gas.privateKey,
    proofKeySeed: seed,
    batchSettler: devnet.contracts.batchSettler,
    usd: devnet.contracts.usd,
  };
  const payers = await freshPayers(6, 1_000_000n);
  const payments = await Promise.all(
    payers.map((p) => signTestPayment(devnet, p, { payTo, amount: 400_000n })),
  );

  if (!options.automine) await devnet.testClient.setAutomine(false);
  const first = await startFacilitatorProcess({ ...base, crashAfterBroadcast: true });
  // Every request dies with the process; which of them were recorded before it died is up to the race.
  const attempts = await Promise.allSettled(payments.map((p) => authorize(first.url, p)));
  // tsx runs the script in a child of its own and reports the kill as 128 + 9.
  expect(["SIGKILL", 137]).toContain(await exited(first.child));
  expect(attempts.every((a) => a.status === "rejected")).toBe(true);

  const mining = options.automine
    ? undefined
    : setInterval(() => {
        devnet.mine().catch(() => undefined);
      }, 100);
  try {
    const second = await startFacilitatorProcess({ ...base, crashAfterBroadcast: false });
    // Before anyone asks again, the restarted engine finishes on its own what the first one recorded:
    // at least the broadcast batch, and any payment that was queued behind it.
    const recorded = await settleOnTheirOwn(second.url, payments, payers);
    expect(recorded.length).toBeGreaterThan(0);
    expect(recorded.every((status) => status === "settled")).toBe(true);
    const responses = await Promise.all(payments.map((p) => authorize(second.url, p)));
    expect(responses.map((r) => r.status)).toEqual(payments.map(() => 200));
    const proofs = (await Promise.all(responses.map((r) => r.json()))) as { proof: unknown }[];
    for (const [i, body] of proofs.entries()) {
      const proof = PaymentProofSchema.parse(body.proof);
      expect(proof.memo).toBe(payments[i]!.memo);
      // The proof stays retrievable: asking again returns the very same proof.
      const again = (await (await authorize(second.url, payments[i]!)).json()) as { proof: unknown };
      expect(again.proof).toEqual(body.proof);
      const record = (await (
        await readPaymentAsPayer(second.url, payments[i]!.authorization.nonce, payers[i]!.account)
      ).json()) as {
        status: string;
      };
      expect(record.status).toBe("settled");
    }
    second.child.kill("SIGTERM");
    await exited(second.child);
  } finally {
    if (mining !== undefined) clearInterval(mining);
    if (!options.automine) await devnet.testClient.setAutomine(true);
  }

  // Exactly once on chain: each payer paid once, the payee received every payment once.
  expect(await balanceOf(payTo)).toBe(6n * 400_000n);
  for (const p of payers) expect(await balanceOf(p.address)).toBe(600_000n);
}

// Each scenario starts two facilitator processes (tsx and a store each): 50-90 s on a busy two-core machine.
describe("a facilitator killed between broadcasting a batch and recording it", () => {
  it("settles every payment exactly once after restart when the batch was mined before the crash", async () => {
    await runCrashScenario({ automine: true });
  }, 240_000);

  it("settles every payment exactly once after restart when the batch was still in the mempool", async () => {
    await runCrashScenario({ automine: false });
  }, 240_000);
});

describe("a facilitator killed between recording a signed batch and broadcasting it", () => {
  it("broadcasts the very transaction it recorded after restart, and no second one", async () => {
    const payTo = privateKeyToAccount(generatePrivateKey()).address;
    const gas = devnet.accounts[1]!;
    const { seed } = generateProofKey();
    const base = {
      rpcUrl: devnet.rpcUrl,
      ...durableStore(),
      gasKey: gas.privateKey,
      proofKeySeed: seed,
      batchSettler: devnet.contracts.batchSettler,
      usd: devnet.contracts.usd,
      crashAfterBroadcast: false,
    };
    const payers = await freshPayers(3, 1_000_000n);
    const payments = await Promise.all(
      payers.map((p) => signTestPayment(devnet, p, { payTo, amount: 250_000n })),
    );
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas.address });

    const first = await startFacilitatorProcess({ ...base, crashAfterRecord: true });
    const attempts = await Promise.allSettled(payments.map((p) => authorize(first.url, p)));
    expect(["SIGKILL", 137]).toContain(await exited(first.child));
    expect(attempts.every((a) => a.status === "rejected")).toBe(true);
    const signed = /SIGNED (0x[0-9a-f]{64})/.exec(first.stdout())?.[1] as `0x${string}` | undefined;
    expect(signed).toBeDefined();
    // Recorded, never sent: the chain has not seen it and the gas account has sent nothing.
    await expect(devnet.publicClient.getTransaction({ hash: signed! })).rejects.toThrow();
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(nonceBefore);

    const second = await startFacilitatorProcess({ ...base, crashAfterRecord: false });
    const statuses = await settleOnTheirOwn(second.url, payments, payers);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((s) => s === "settled")).toBe(true);
    const responses = await Promise.all(payments.map((p) => authorize(second.url, p)));
    expect(responses.map((r) => r.status)).toEqual(payments.map(() => 200));
    const transactions = await Promise.all(
      payments.map(async (p, i) => {
        const response = await readPaymentAsPayer(second.url, p.authorization.nonce, payers[i]!.account);
        return ((await response.json()) as { transaction: string }).transaction;
      }),
    );
    second.child.kill("SIGTERM");
    await exited(second.child);

    // The recorded bytes were mined as they were signed: same hash, the account nonce they were given.
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: signed! });
    expect(receipt.status).toBe("success");
    const mined = await devnet.publicClient.getTransaction({ hash: signed! });
    expect(mined.nonce).toBe(nonceBefore);
    // Exactly once on chain, and no second settlement of the recorded payments.
    expect(await balanceOf(payTo)).toBe(3n * 250_000n);
    for (const p of payers) expect(await balanceOf(p.address)).toBe(750_000n);
    expect(transactions).toContain(signed);
    // Every transaction the gas account sent settled some of these payments: none was signed twice.
    const distinct = new Set(transactions);
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(
      nonceBefore + distinct.size,
    );
  }, 240_000);
});
