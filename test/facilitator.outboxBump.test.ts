/**
 * A stuck transaction is replaced: the settlement batch of a payment is broadcast, then the chain's
 * base fee jumps above what it offers (anvil with mining paused, then one expensive block) so it sits
 * unmined; after `bumpAfterMs` the outbox signs the same call at the same nonce with a higher fee,
 * records it, broadcasts it, and the payment completes exactly once with the replacement's
 * transaction — the payer debited once, the first transaction never mined.
 */
import { type Hash, parseGwei, toHex } from "viem";
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
