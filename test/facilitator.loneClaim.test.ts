/**
 * A payment that finds its engine idle is inserted already claimed into a batch of its own, and that
 * batch's call signed, in one store transaction (settlement/batchClaims.ts `insertAndClaim`). What the
 * transaction writes, and what it leaves when the nonce is taken: nothing at all (the batch row it
 * inserted is rolled back with it), and no nonce of the gas key used up. And a claim from the queue
 * that finds the queue's head itself (`claimBatch` with `claimAtOnce`) takes what the claim after a read
 * of the head takes: oldest first, no more than the smallest cap among them.
 */
import pino from "pino";
import { type Address, getAddress, type Hex, keccak256, toHex } from "viem";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createOutbox } from "../src/facilitator/outbox/createOutbox.ts";
import { createGasKey } from "../src/facilitator/outbox/gasKey.ts";
import type { Outbox } from "../src/facilitator/outbox/outboxTypes.ts";
import { insertPayment, type NewPayment } from "../src/facilitator/paymentRecords.ts";
import { claimBatch, insertAndClaim, SETTLEMENT_KIND } from "../src/facilitator/settlement/batchClaims.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";

let devnet: Devnet;
let store: Store;
let outbox: Outbox;
let gas: Address;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const key = createGasKey({
    account: devnet.accounts[1]!.account,
    client: devnet.publicClient,
    chainId: devnet.publicClient.chain.id,
    clock: systemClock,
  });
  gas = key.address;
  outbox = createOutbox({
    store,
    client: devnet.publicClient,
    key,
    clock: systemClock,
    logger: pino({ level: "silent" }),
  });
  // The engine's handler is not under test here: its outcomes are only acknowledged.
  outbox.handle(SETTLEMENT_KIND, async (_outcome, commit) => {
    await commit(async () => {});
  });
});

afterAll(async () => {
  await outbox?.stop();
  await store?.close();
  await devnet?.stop();
});

/** A payment as the engine's checks would have passed it (its signature is not checked here). */
function newPayment(label: string): NewPayment {
  return {
    nonce: keccak256(toHex(label)),
    network: devnet.network,
    token: devnet.contracts.usd,
    payer: devnet.accounts[2]!.address,
    payTo: getAddress("0x00000000000000000000000000000000000a11ce"),
    amount: 10_000n,
    memo: `memo of ${label}`,
    source: "tollgate",
    validAfter: 0n,
    validBefore: 4_000_000_000n,
    signature: `0x${"11".repeat(65)}` as Hex,
  };
}

const deps = () => ({ store, outbox, network: devnet.network, batchSettler: devnet.contracts.batchSettler });
const countOf = async (table: string) =>
  Number((await store.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`))[0]!.n);

describe("a lone payment inserted and claimed at once", () => {
  it("writes the payment claimed, its batch and the batch's signed transaction together", async () => {
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas, blockTag: "pending" });
    const claimed = await insertAndClaim(deps(), newPayment("alone"));
    expect(claimed).toBeDefined();
    const { batch, rows, outboxId, drained } = claimed!;
    expect(drained).toBe(true);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: "submitted", batch_id: batch.id, attempts: 1 });
    const stored = await store.query<{ status: string; item_count: number; outbox_id: string }>(
      "SELECT status, item_count, outbox_id FROM settlement_batches WHERE id = $1",
      [batch.id],
    );
    expect(stored).toEqual([{ status: "submitted", item_count: 1, outbox_id: String(outboxId) }]);
    const row = await store.query<{ kind: string; owner: string; nonce: string; raw_tx: string | null }>(
      "SELECT kind, owner, nonce::text AS nonce, raw_tx FROM tx_outbox WHERE id = $1",
      [outboxId],
    );
    expect(row).toEqual([
      {
        kind: SETTLEMENT_KIND,
        owner: String(batch.id),
        nonce: String(nonceBefore),
        raw_tx: expect.any(String),
      },
    ]);
    // Broadcast once committed, with no wake-up: it ends like any batch.
    expect(await outbox.waitFor(outboxId)).toMatchObject({ status: "confirmed" });
  });

  it("writes nothing when the nonce is taken, and leaves the gas key's next nonce unused", async () => {
    const taken = newPayment("taken");
    expect(await insertPayment(store, taken)).toBeDefined();
    const batches = await countOf("settlement_batches");
    const rows = await countOf("tx_outbox");
    expect(await insertAndClaim(deps(), { ...taken, amount: 20_000n })).toBeUndefined();
    expect(await insertAndClaim(deps(), taken)).toBeUndefined();
    expect(await countOf("settlement_batches")).toBe(batches);
    expect(await countOf("tx_outbox")).toBe(rows);
    const stored = await store.query<{ status: string; amount: string; batch_id: string | null }>(
      "SELECT status, amount::text AS amount, batch_id FROM payments WHERE nonce = $1",
      [taken.nonce],
    );
    expect(stored).toEqual([{ status: "pending", amount: "10000", batch_id: null }]);
    // The next lone payment takes the chain's next nonce: nothing was taken for the refused ones.
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas, blockTag: "pending" });
    const next = await insertAndClaim(deps(), newPayment("after the refusals"));
    const nonce = await store.query<{ nonce: string }>(
      "SELECT nonce::text AS nonce FROM tx_outbox WHERE id = $1",
      [next!.outboxId],
    );
    expect(nonce).toEqual([{ nonce: String(nonceBefore) }]);
    expect(await outbox.waitFor(next!.outboxId)).toMatchObject({ status: "confirmed" });
  });
});

describe("a claim that finds the queue's head itself", () => {
  const rule = { maxBatchSize: 10, lingerMs: 200, inFlight: 0 };
  /** Three pending payments, the second capped at batches of two (as after a batch of four reverted). */
  async function queueThree(label: string): Promise<string[]> {
    const nonces: string[] = [];
    for (let i = 0; i < 3; i++) {
      const row = await insertPayment(store, newPayment(`${label} ${i}`));
      nonces.push(row!.nonce);
    }
    await store.query("UPDATE payments SET batch_cap = 2 WHERE nonce = $1", [nonces[1]]);
    return nonces;
  }
  // The payment the tests above left pending (its nonce taken) is not this describe's queue.
  beforeEach(async () => {
    await store.query("DELETE FROM payments WHERE status = 'pending'");
  });
  const pendingCount = async () =>
    Number(
      (await store.query<{ n: string }>("SELECT count(*) AS n FROM payments WHERE status = 'pending'"))[0]!.n,
    );

  it("writes nothing when the queue is empty", async () => {
    expect(await pendingCount()).toBe(0);
    const batches = await countOf("settlement_batches");
    const rows = await countOf("tx_outbox");
    expect(await claimBatch(deps(), { ...rule, claimAtOnce: true })).toBeUndefined();
    expect(await countOf("settlement_batches")).toBe(batches);
    expect(await countOf("tx_outbox")).toBe(rows);
  });

  for (const claimAtOnce of [false, true]) {
    it(`claims the oldest payments up to the smallest cap among them (${claimAtOnce ? "no read of the head first" : "after a read of the head"})`, async () => {
      const nonces = await queueThree(`capped ${claimAtOnce}`);
      const first = await claimBatch(deps(), { ...rule, claimAtOnce });
      expect(first && "batch" in first).toBe(true);
      const claimed = first as Exclude<typeof first, undefined | { kind: "held" }>;
      expect(claimed.rows.map((r) => r.nonce)).toEqual(nonces.slice(0, 2));
      expect(claimed.drained).toBe(false);
      expect(claimed.rows.every((r) => r.status === "submitted" && r.batch_id === claimed.batch.id)).toBe(
        true,
      );
      const stored = await store.query<{ item_count: number; token: string }>(
        "SELECT item_count, token FROM settlement_batches WHERE id = $1",
        [claimed.batch.id],
      );
      expect(stored).toEqual([{ item_count: 2, token: devnet.contracts.usd.toLowerCase() }]);
      const second = await claimBatch(deps(), { ...rule, claimAtOnce });
      const rest = second as Exclude<typeof second, undefined | { kind: "held" }>;
      expect(rest.rows.map((r) => r.nonce)).toEqual(nonces.slice(2));
      expect(rest.drained).toBe(true);
      expect(await pendingCount()).toBe(0);
      for (const c of [claimed, rest])
        expect(await outbox.waitFor(c.outboxId)).toMatchObject({ status: "confirmed" });
    });
  }
});
