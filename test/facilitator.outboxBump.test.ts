/**
 * A stuck transaction is replaced: the settlement batch of a payment is broadcast, then the chain's
 * base fee jumps above what it offers (anvil with mining paused, then one expensive block) so it sits
 * unmined; after `bumpAfterMs` the outbox signs the same call at the same nonce with a higher fee,
 * records it, broadcasts it, and the payment completes exactly once with the replacement's
 * transaction — the payer debited once, the first transaction never mined.
 *
 * With a maximum fee (TOLLGATE_MAX_FEE_GWEI) under a base fee risen 100×, the bumps stop at the maximum
 * and the work waits: nothing dropped, no payment failed, the operator told once (log, metric,
 * `/healthz`), payers answered a structured 503; when the fee falls every payment settles once.
 */
import { type Hash, parseGwei, parseTransaction, toHex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import {
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { capturingLogger } from "../src/store/capturingLogger.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let store: Store;
let facilitator: Facilitator;
let server: RunningServer;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[3]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    builtinModules: false,
    settlement: { authorizeTimeoutMs: 120_000, reconcileIntervalMs: 200 },
    outbox: { bumpAfterMs: 1_500, reconcileIntervalMs: 200 },
  });
  await facilitator.start();
  server = await serveApp(facilitator.app);
}, 120_000);

afterAll(async () => {
  await server?.close();
  await facilitator?.stop();
  await store?.close();
  await devnet?.stop();
});

/** Anvil's own methods, which viem's typed RPC schema does not list. */
const anvil = (method: string, params: unknown[] = []) =>
  (devnet.publicClient.request as (args: { method: string; params: unknown[] }) => Promise<unknown>)({
    method,
    params,
  });

async function settlementRow(): Promise<
  { status: string; tx_hash: Hash; replaced_hashes: Hash[] } | undefined
> {
  const rows = await store.query<{ status: string; tx_hash: Hash; replaced_hashes: Hash[] }>(
    "SELECT status, tx_hash, replaced_hashes FROM tx_outbox WHERE kind = 'settlement' ORDER BY id DESC LIMIT 1",
  );
  return rows[0];
}

describe("outbox fee bump", () => {
  it("replaces a settlement stuck under a risen base fee with the same nonce and a higher fee; the payment completes once", async () => {
    const payer = privateKeyToAccount(generatePrivateKey());
    const payTo = devnet.accounts[1]!.address;
    const price = 250_000n;
    await devnet.fund(payer.address, { usd: 1_000_000n });
    const balance = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const [payerBefore, payeeBefore] = [await balance(payer.address), await balance(payTo)];
    const signedPayment = await signTestPayment(devnet, { address: payer.address, account: payer } as never, {
      payTo,
      amount: price,
    });

    await anvil("evm_setAutomine", [false]);
    try {
      const answer = fetch(`${server.url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment }),
      });
      // The batch is signed, recorded and broadcast; nothing is mined.
      let first: Hash | undefined;
      for (let i = 0; i < 600 && first === undefined; i++) {
        const row = await settlementRow();
        if (row?.status === "broadcast") first = row.tx_hash;
        else await new Promise((r) => setTimeout(r, 50));
      }
      expect(first).toBeDefined();
      // The base fee jumps far above what the transaction offers: one block without it.
      await anvil("anvil_setNextBlockBaseFeePerGas", [toHex(parseGwei("2000"))]);
      await anvil("evm_mine");
      await expect(devnet.publicClient.getTransactionReceipt({ hash: first! })).rejects.toThrow();
      // Blocks every second again; the base fee takes minutes to fall back to the first offer.
      await anvil("evm_setIntervalMining", [1]);

      const response = await answer;
      expect(response.status).toBe(200);
      const body = (await response.json()) as { proof: { tx: Hash }; settled: { transaction: Hash } };
      const row = await settlementRow();
      expect(row?.status).toBe("confirmed");
      expect(row?.replaced_hashes).toContain(first);
      expect(body.settled.transaction).toBe(row?.tx_hash);
      expect(body.settled.transaction).not.toBe(first);
      const mined = await devnet.publicClient.getTransaction({ hash: body.settled.transaction });
      const stuck = await devnet.publicClient.getTransaction({ hash: first! }).catch(() => undefined);
      if (stuck !== undefined) {
        expect(mined.nonce).toBe(stuck.nonce);
        expect(mined.maxFeePerGas! > stuck.maxFeePerGas!).toBe(true);
      }
      await expect(devnet.publicClient.getTransactionReceipt({ hash: first! })).rejects.toThrow();

      // Paid exactly once, and the same payment sent again answers the same transaction.
      expect(await balance(payer.address)).toBe(payerBefore - price);
      expect(await balance(payTo)).toBe(payeeBefore + price);
      const again = await fetch(`${server.url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment }),
      });
      expect(((await again.json()) as { settled: { transaction: Hash } }).settled.transaction).toBe(
        body.settled.transaction,
      );
      expect(await balance(payer.address)).toBe(payerBefore - price);
      const rows = await store.query("SELECT id FROM tx_outbox WHERE kind = 'settlement'");
      expect(rows).toHaveLength(1);
    } finally {
      await anvil("evm_setIntervalMining", [0]);
      await anvil("evm_setAutomine", [true]);
    }
  }, 180_000);
});

describe("a fee spike past the maximum fee", () => {
  const GWEI = 1_000_000_000n;
  const ceiling = 10n * GWEI;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("bumps a stuck batch up to the maximum, then holds the work unmined and tells the operator once; when the fee falls each payment settles once", async () => {
    // A facilitator of its own (own store, own gas key) whose transactions never offer more than 10 gwei.
    const spikeStore = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const captured = capturingLogger();
    const gasKey = devnet.accounts[2]!;
    const spiked = createFacilitator({
      store: spikeStore,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: gasKey.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      builtinModules: false,
      logger: captured.logger,
      settlement: { authorizeTimeoutMs: 4_000, reconcileIntervalMs: 200, lingerMs: 0 },
      outbox: { bumpAfterMs: 1_000, reconcileIntervalMs: 200, maxFeePerGas: ceiling },
    });
    await spiked.start();
    const spikedServer = await serveApp(spiked.app);
    const payTo = devnet.accounts[1]!.address;
    const price = 100_000n;
    const balance = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const payers = [privateKeyToAccount(generatePrivateKey()), privateKeyToAccount(generatePrivateKey())];
    for (const payer of payers) await devnet.fund(payer.address, { usd: 1_000_000n });
    const payeeBefore = await balance(payTo);
    const signed = await Promise.all(
      payers.map((payer) =>
        signTestPayment(devnet, { address: payer.address, account: payer } as never, {
          payTo,
          amount: price,
        }),
      ),
    );
    const authorize = (signedPayment: unknown, url = spikedServer.url) =>
      fetch(`${url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment }),
      });
    const outboxRows = () =>
      spikeStore.query<{
        id: string;
        status: string;
        nonce: string;
        raw_tx: `0x${string}`;
        replaced_hashes: Hash[];
      }>(
        "SELECT id, status, nonce, raw_tx, replaced_hashes FROM tx_outbox WHERE kind = 'settlement' ORDER BY id",
      );
    const metric = async (name: string) => {
      const text = await (await fetch(`${spikedServer.url}/metrics`)).text();
      const line = text.split("\n").find((l) => l.startsWith(`${name} `));
      return line === undefined ? undefined : Number(line.split(" ")[1]);
    };

    // A base fee of 1 gwei, then mining paused: the first batch offers about 4.4 gwei.
    await anvil("anvil_setNextBlockBaseFeePerGas", [toHex(GWEI)]);
    await anvil("evm_mine");
    await anvil("evm_setAutomine", [false]);
    try {
      const firstAnswer = authorize(signed[0]);
      let first: { raw_tx: `0x${string}` } | undefined;
      for (let i = 0; i < 600 && first === undefined; i++) {
        const [row] = await outboxRows();
        if (row?.status === "broadcast") first = row;
        else await sleep(50);
      }
      expect(first).toBeDefined();
      const offered = parseTransaction(first!.raw_tx);
      expect(offered.maxFeePerGas! < ceiling).toBe(true);

      // The base fee jumps 100×, to 100 gwei, ten times the maximum: one block without the batch.
      await anvil("anvil_setNextBlockBaseFeePerGas", [toHex(100n * GWEI)]);
      await anvil("evm_mine");
      // A second payment arrives during the spike: its batch is signed at the maximum, never above.
      const secondAnswer = authorize(signed[1]);

      for (let i = 0; i < 200 && spiked.context.outbox.feeHold()?.rows !== 2; i++) await sleep(100);
      expect(spiked.context.outbox.feeHold()).toMatchObject({ rows: 2, ceiling, baseFee: 100n * GWEI });
      // A few more bump rounds: nothing changes, nothing more is said.
      await sleep(3_000);

      const rows = await outboxRows();
      expect(rows.map((r) => r.status)).toEqual(["broadcast", "broadcast"]);
      // The stuck batch was replaced once, same nonce, its fees up by at least the 12.5 % a node asks
      // and exactly at the maximum; the spike's batch ends at the maximum too (signed there, or on fees
      // read a moment before the spike and bumped there).
      const replaced = parseTransaction(rows[0]!.raw_tx);
      expect(rows[0]!.replaced_hashes).toHaveLength(1);
      expect(replaced.nonce).toBe(offered.nonce);
      expect(replaced.maxFeePerGas).toBe(ceiling);
      expect(replaced.maxFeePerGas! * 8n >= offered.maxFeePerGas! * 9n).toBe(true);
      expect(replaced.maxPriorityFeePerGas! * 8n >= offered.maxPriorityFeePerGas! * 9n).toBe(true);
      expect(parseTransaction(rows[1]!.raw_tx).maxFeePerGas).toBe(ceiling);
      expect(rows[1]!.replaced_hashes.length).toBeLessThanOrEqual(1);

      // Payers wait, then get a structured 503 saying why, not a failure and not a 500.
      const timedOut = await firstAnswer;
      expect(timedOut.status).toBe(503);
      expect(timedOut.headers.get("retry-after")).toBe("30");
      expect(await timedOut.json()).toMatchObject({
        error: { code: "ChainUnavailable", details: { reason: "fee_above_maximum" } },
      });
      expect((await secondAnswer).status).toBe(503);

      // The operator is told: one warning for the episode, the gauges, and /healthz degraded (200).
      const held = captured.lines().filter((l) => l.event === "fees.held");
      expect(held).toHaveLength(1);
      expect(held[0]).toMatchObject({ level: 40, maxFeePerGas: ceiling.toString() });
      expect(await metric("tollgate_outbox_fee_held_rows")).toBe(2);
      expect(await metric("tollgate_gas_max_fee_wei")).toBe(Number(ceiling));
      expect(await metric("tollgate_gas_base_fee_wei")).toBe(Number(100n * GWEI));
      const health = await fetch(`${spikedServer.url}/healthz`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({
        status: "degraded",
        checks: {
          chain: { ok: true },
          fees: { ok: false, details: { rows: 2, baseFeeGwei: "100", maxFeeGwei: "10" } },
        },
      });
      // A caller that may not read /metrics learns that fees hold, not the figures.
      const publicHealth = (await (await spiked.app.request("/healthz")).json()) as {
        checks: Record<string, { ok: boolean; since?: string; details?: unknown }>;
      };
      expect(publicHealth.checks.fees).toMatchObject({ ok: false });
      expect(publicHealth.checks.fees?.since).toBeDefined();
      expect(publicHealth.checks.fees?.details).toBeUndefined();
      expect(publicHealth.checks.gas?.details).toBeUndefined();

      // Nothing dropped, no payment failed.
      const statuses = await spikeStore.query<{ status: string }>("SELECT status FROM payments");
      expect(statuses.map((p) => p.status).sort()).toEqual(["submitted", "submitted"]);
      expect(await metric("tollgate_payments_failed_total")).toBeUndefined();

      // The fee falls back under the maximum: blocks again, and everything settles once.
      await anvil("anvil_setNextBlockBaseFeePerGas", [toHex(GWEI)]);
      await anvil("evm_mine");
      await anvil("evm_setAutomine", [true]);
      for (let i = 0; i < 300; i++) {
        const done = await spikeStore.query("SELECT 1 FROM payments WHERE status = 'settled'");
        if (done.length === 2) break;
        await sleep(100);
      }
      const answers = await Promise.all(signed.map((payment) => authorize(payment)));
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      const settled = await Promise.all(
        answers.map(
          async (a) => ((await a.json()) as { settled: { transaction: Hash } }).settled.transaction,
        ),
      );
      for (const payer of payers) expect(await balance(payer.address)).toBe(1_000_000n - price);
      expect(await balance(payTo)).toBe(payeeBefore + 2n * price);
      const final = await outboxRows();
      expect(final.map((r) => r.status)).toEqual(["confirmed", "confirmed"]);
      for (const [i, hash] of settled.entries()) {
        const mined = await devnet.publicClient.getTransaction({ hash });
        expect(BigInt(mined.nonce)).toBe(BigInt(final[i]!.nonce));
        expect(mined.maxFeePerGas! <= ceiling).toBe(true);
      }

      // The episode ends with one line, and /healthz and the gauge say so.
      expect(spiked.context.outbox.feeHold()).toBeUndefined();
      expect(captured.lines().filter((l) => l.event === "fees.released")).toHaveLength(1);
      expect(captured.lines().filter((l) => l.event === "fees.held")).toHaveLength(1);
      expect(await metric("tollgate_outbox_fee_held_rows")).toBe(0);
      const after = (await (await fetch(`${spikedServer.url}/healthz`)).json()) as {
        status: string;
        checks: Record<string, { ok: boolean }>;
      };
      expect(after.checks.fees?.ok).toBe(true);
      expect(after.status).toBe("ok");
    } finally {
      // Rows still held (an assertion failed above) must be mined for the facilitator to stop.
      await anvil("anvil_setNextBlockBaseFeePerGas", [toHex(GWEI)]);
      await anvil("evm_mine");
      await anvil("evm_setAutomine", [true]);
      await spikedServer.close();
      await spiked.stop();
      await spikeStore.close();
    }
  }, 180_000);
});
