/**
 * Two facilitator processes on one PostgreSQL database with one gas key, both given the same stream of
 * payments (every payment sent to both at once): each payment is settled once, both answer with the
 * same proof, and the shared nonce row keeps their transactions on distinct nonces (no transaction is
 * dropped or displaced). Needs a real PostgreSQL server: set DATABASE_URL.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { createStore } from "../src/store/createStore.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  console.warn(
    "facilitator.multiInstance.test.ts skipped: two facilitator instances need a shared PostgreSQL (set DATABASE_URL)",
  );
}

// The loader in this process, not the tsx CLI: the CLI runs the script in a child of its own, which a
// SIGKILL of the CLI would leave running.
const tsxLoader = import.meta.resolve("tsx");
const fixture = new URL("./fixtures/facilitatorProcess.ts", import.meta.url).pathname;
let devnet: Devnet;
const cleanups: (() => Promise<void> | void)[] = [];

function startFacilitatorProcess(
  config: Record<string, unknown>,
): Promise<{ url: string; child: ChildProcess }> {
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
      if (match?.[1] !== undefined) resolve({ url: match[1], child });
    });
    child.once("exit", (code, signal) =>
      reject(new Error(`facilitator exited early (${code ?? signal}): ${stderr}`)),
    );
  });
}

function authorize(url: string, signedPayment: SignedPayment): Promise<Response> {
  return fetch(`${url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

describe.skipIf(!DATABASE_URL)("two facilitator instances on one PostgreSQL", () => {
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 3 });
  });

  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    await devnet?.stop();
  });

  it("settles each payment of a stream sent to both exactly once, on distinct nonces, with one proof", async () => {
    const schema = `multi_${randomBytes(5).toString("hex")}`;
    cleanups.push(async () => {
      const store = await createStore({ databaseUrl: DATABASE_URL, schema, migrate: false });
      await store.dropSchema();
      await store.close();
    });
    const gas = devnet.accounts[1]!;
    const { seed } = generateProofKey();
    const config = {
      rpcUrl: devnet.rpcUrl,
      databaseUrl: DATABASE_URL,
      schema,
      gasKey: gas.privateKey,
      proofKeySeed: seed,
      batchSettler: devnet.contracts.batchSettler,
      usd: devnet.contracts.usd,
      crashAfterBroadcast: false,
    };
    // The first applies the migrations; the second starts on the migrated schema.
    const a = await startFacilitatorProcess(config);
    const b = await startFacilitatorProcess(config);
    const payTo = privateKeyToAccount(generatePrivateKey()).address;
    const payers: DevnetAccount[] = [];
    for (let i = 0; i < 12; i++) {
      const privateKey = generatePrivateKey();
      const account = privateKeyToAccount(privateKey);
      await devnet.fund(account.address, { usd: 1_000_000n });
      payers.push({ address: account.address, privateKey, account });
    }
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas.address });

    // A stream: payments arrive a few at a time, each at both instances at once.
    const answers: { a: Response; b: Response }[] = [];
    for (let round = 0; round < 4; round++) {
      const batch = payers.slice(round * 3, round * 3 + 3);
      const payments = await Promise.all(
        batch.map((p) => signTestPayment(devnet, p, { payTo, amount: 100_000n })),
      );
      answers.push(
        ...(await Promise.all(
          payments.map(async (p) => {
            const [ra, rb] = await Promise.all([authorize(a.url, p), authorize(b.url, p)]);
            return { a: ra, b: rb };
          }),
        )),
      );
    }
    for (const answer of answers) {
      expect([answer.a.status, answer.b.status]).toEqual([200, 200]);
      const [pa, pb] = (await Promise.all([answer.a.json(), answer.b.json()])) as { proof: unknown }[];
      expect(pa!.proof).toEqual(pb!.proof);
    }

    a.child.kill("SIGTERM");
    b.child.kill("SIGTERM");
    // Exactly once on chain.
    const balance = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    expect(await balance(payTo)).toBe(12n * 100_000n);
    for (const p of payers) expect(await balance(p.address)).toBe(900_000n);
    // Every transaction the key sent is one outbox row, each on its own nonce, none lost to a nonce clash.
    const store = await createStore({ databaseUrl: DATABASE_URL, schema, migrate: false });
    try {
      // Ordered by the numeric column: the text alias would put nonce 10 between 1 and 2.
      const rows = await store.query<{ status: string; nonce: string }>(
        "SELECT status, nonce::text AS nonce FROM tx_outbox ORDER BY tx_outbox.nonce",
      );
      expect(rows.every((r) => r.status === "confirmed")).toBe(true);
      expect(rows.map((r) => Number(r.nonce))).toEqual(rows.map((_, i) => nonceBefore + i));
      expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(
        nonceBefore + rows.length,
      );
      const settled = await store.query<{ n: string }>(
        "SELECT count(*) AS n FROM payments WHERE status = 'settled'",
      );
      expect(Number(settled[0]?.n)).toBe(12);
    } finally {
      await store.close();
    }
  }, 240_000);
});
