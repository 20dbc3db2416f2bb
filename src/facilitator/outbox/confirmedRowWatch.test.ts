import pino from "pino";
import {
  createPublicClient,
  createWalletClient,
  type Hash,
  http,
  type PublicClient,
  parseEther,
  type WalletClient,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { foundry } from "viem/chains";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Anvil, startAnvil } from "../../chain/startAnvil.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { createConfirmedRowWatch } from "./confirmedRowWatch.ts";
import type { OutboxReopenHook } from "./outboxTypes.ts";

// anvil's first dev account.
const sender = privateKeyToAccount("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");
const KIND = "test-kind";

let anvil: Anvil;
let store: Store;
let client: PublicClient;
let wallet: WalletClient;

beforeAll(async () => {
  anvil = await startAnvil();
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
  client = createPublicClient({ chain: foundry, transport: http(anvil.rpcUrl) }) as PublicClient;
  wallet = createWalletClient({ account: sender, chain: foundry, transport: http(anvil.rpcUrl) });
});
afterAll(async () => {
  await store?.close();
  await anvil?.stop();
});

/** Sends a transfer (mined at once) and records it as a confirmed outbox row, as the outbox would. */
async function confirmedRow(): Promise<{ id: number; hash: Hash; block: bigint }> {
  const hash = await wallet.sendTransaction({
    account: sender,
    chain: foundry,
    to: "0x000000000000000000000000000000000000bEEF",
    value: parseEther("0.001"),
  });
  const receipt = await client.waitForTransactionReceipt({ hash });
  const [row] = await store.query<{ id: string }>(
    `INSERT INTO tx_outbox (chain_id, sender, kind, owner, to_address, data, gas_limit, status, nonce,
       tx_hash, raw_tx, block_number, block_hash, done_at)
     VALUES ($1, $2, $3, 'owner', $4, '0x', 21000, 'confirmed', $8, $5, '0x00', $6, $7, now())
     RETURNING id`,
    [
      foundry.id,
      sender.address.toLowerCase(),
      KIND,
      "0x000000000000000000000000000000000000beef",
      hash,
      receipt.blockNumber,
      receipt.blockHash,
      (await client.getTransaction({ hash })).nonce,
    ],
  );
  return { id: Number(row!.id), hash, block: receipt.blockNumber };
}

describe("the reorganisation watch of confirmed outbox rows", () => {
  it("reopens a row mined after its last check and rolled back to the very head that check saw", async () => {
    const reopenedByHook: number[] = [];
    const hook: OutboxReopenHook = async (_tx, row) => {
      reopenedByHook.push(row.id);
    };
    const watch = createConfirmedRowWatch({
      store,
      client,
      scope: { chainId: foundry.id, sender: sender.address },
      logger: pino({ level: "silent" }),
      hooks: new Map([[KIND, hook]]),
    });
    const first = await confirmedRow();
    expect(await watch.check()).toEqual({ reopened: [], watching: true });

    // Mined and recorded after that check; then its block is rolled back, and the head is again the
    // block the check saw (same hash).
    const second = await confirmedRow();
    expect(second.block).toBe(first.block + 1n);
    await client.request({ method: "anvil_rollback", params: [1] } as never);
    expect(await client.getBlockNumber({ cacheTime: 0 })).toBe(first.block);

    expect(await watch.check()).toEqual({ reopened: [second.id], watching: true });
    expect(reopenedByHook).toEqual([second.id]);
    const rows = await store.query<{ id: string; status: string }>(
      "SELECT id, status FROM tx_outbox WHERE id = ANY($1::bigint[]) ORDER BY id",
      [[first.id, second.id]],
    );
    expect(rows.map((r) => r.status)).toEqual(["confirmed", "broadcast"]);
    // Nothing changed since: the next check stops at the head.
    expect(await watch.check()).toEqual({ reopened: [], watching: true });
  });
});
