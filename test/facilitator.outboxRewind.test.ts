/**
 * The transaction outbox when the chain loses transactions it recorded: a node reverted to an older
 * state (here `evm_revert`, as a node restarted from an older state file or a deep reorg) forgets rows
 * already delivered as confirmed, so the account's nonce falls below the rows the outbox signs next; a
 * node that drops its mempool forgets rows still open. Either way the outbox broadcasts the recorded
 * bytes again in nonce order, every row confirms, and nothing is signed twice or delivered twice.
 */
import pino from "pino";
import { type Address, type Hash, zeroAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createOutbox, FILLER_KIND, type OutboxClient } from "../src/facilitator/outbox/createOutbox.ts";
import { createGasKey, type GasKey } from "../src/facilitator/outbox/gasKey.ts";
import { findOutboxRow } from "../src/facilitator/outbox/outboxRecords.ts";
import type { Outbox } from "../src/facilitator/outbox/outboxTypes.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";

const logger = pino({ level: "silent" });
let devnet: Devnet;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
});

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await devnet?.stop();
});

async function freshStore(): Promise<Store> {
  const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  cleanups.push(() => store.close());
  return store;
}

function keyOf(index: number): GasKey {
  return createGasKey({
    account: devnet.accounts[index]!.account,
    client: devnet.publicClient,
    chainId: devnet.publicClient.chain.id,
    clock: systemClock,
  });
}

function outboxOver(
  store: Store,
  key: GasKey,
  options: { stuckAfterMs?: number; client?: OutboxClient } = {},
): Outbox {
  const outbox = createOutbox({
    store,
    client: options.client ?? devnet.publicClient,
    key,
    clock: systemClock,
    logger,
    reconcileIntervalMs: 100,
    staleMs: 500,
    stuckAfterMs: options.stuckAfterMs ?? 1_000,
    // No fee bump and a long receipt wait: only the rewind repair can bring lost transactions back
    // within the test's time.
    bumpAfterMs: false,
    receiptTimeoutMs: 300_000,
  });
  outbox.handle("probe", async (outcome, commit) => {
    await commit(async (tx) => {
      await tx.query("INSERT INTO events (type, data) VALUES ('test.outbox_probe', $1)", [
        { id: outcome.id, status: outcome.status },
      ]);
    });
  });
  cleanups.push(() => outbox.stop());
  return outbox;
}

/** The devnet's client, counting the lost-transaction checks (reads of the pending nonce) made through it. */
function countingClient(): { client: OutboxClient; checks: () => number } {
  const chain = devnet.publicClient;
  let checks = 0;
  const client: OutboxClient = {
    pollingInterval: chain.pollingInterval,
    sendRawTransaction: (args) => chain.sendRawTransaction(args),
    getTransactionReceipt: (args) => chain.getTransactionReceipt(args),
    waitForTransactionReceipt: (args) => chain.waitForTransactionReceipt(args),
    getBlockNumber: (args) => chain.getBlockNumber(args),
    getBlock: ((args) => chain.getBlock(args)) as OutboxClient["getBlock"],
    getTransactionCount: (args) => {
      if (args.blockTag === "pending") checks++;
      return chain.getTransactionCount(args);
    },
  };
  return { client, checks: () => checks };
}

/** Runs `fn` with automine off (a node that holds transactions in its pool), turning it back on after. */
async function withoutAutomine<T>(fn: () => Promise<T>): Promise<T> {
  await devnet.testClient.setAutomine(false);
  try {
    return await fn();
  } finally {
    await devnet.testClient.setAutomine(true);
  }
}

/** Enqueues two probes, waits for their broadcast, and has the node lose both from its pool. */
async function dropTwo(store: Store, outbox: Outbox, owners: [string, string]): Promise<number[]> {
  await outbox.start();
  const ids = [await outbox.enqueue(store, probe(owners[0])), await outbox.enqueue(store, probe(owners[1]))];
  const signed = await Promise.all(ids.map((id) => outbox.waitForHash(id)));
  for (const { hash } of signed) await devnet.testClient.dropTransaction({ hash });
  await expect(devnet.publicClient.getTransaction({ hash: signed[0]!.hash })).rejects.toThrow();
  return ids;
}

/** Each row confirmed under the hash it was first signed with (broadcast again, not re-signed), once. */
async function expectRebroadcast(store: Store, outbox: Outbox, ids: readonly number[]): Promise<void> {
  const outcomes = await Promise.all(ids.map((id) => outbox.waitFor(id)));
  expect(outcomes.map((o) => o.status)).toEqual(ids.map(() => "confirmed"));
  for (const id of ids) {
    const row = await findOutboxRow(store, id);
    expect(row?.replaced_hashes).toEqual([]);
    expect(outcomes.find((o) => o.id === id)?.hash).toBe(row?.tx_hash);
    expect(await deliveries(store, id)).toBe(1);
  }
}

/** A zero-value call to an address without code: it always succeeds and moves nothing. */
function probe(owner: string) {
  return { kind: "probe", owner, to: zeroAddress as Address, data: "0x" as const, gas: 30_000n };
}

async function deliveries(store: Store, id: number): Promise<number> {
  const rows = await store.query<{ n: string }>(
    "SELECT count(*) AS n FROM events WHERE type = 'test.outbox_probe' AND (data->>'id')::bigint = $1",
    [id],
  );
  return Number(rows[0]?.n ?? 0);
}

async function fillers(store: Store): Promise<number> {
  const rows = await store.query<{ n: string }>("SELECT count(*) AS n FROM tx_outbox WHERE kind = $1", [
    FILLER_KIND,
  ]);
  return Number(rows[0]?.n ?? 0);
}

describe("outbox on a chain that lost its transactions", () => {
  it("broadcasts again the recorded bytes of confirmed rows a reverted chain lost, so the rows signed after them are mined", async () => {
    const store = await freshStore();
    const key = keyOf(2);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    const snapshot = await devnet.snapshot();
    await outbox.start();

    const early: number[] = [];
    for (let i = 0; i < 3; i++) early.push(await outbox.enqueue(store, probe(`early${i}`)));
    const delivered = await Promise.all(early.map((id) => outbox.waitFor(id)));
    expect(delivered.map((o) => o.status)).toEqual(["confirmed", "confirmed", "confirmed"]);
    const hashes = delivered.map((o) => o.hash as Hash);

    // The node forgets them: its account nonce is back below the three rows already confirmed.
    await devnet.revert(snapshot);
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore);
    for (const hash of hashes) await expect(devnet.publicClient.getTransaction({ hash })).rejects.toThrow();

    // The next row is signed above the gap; it is mined only once the lost three are back.
    const late = await outbox.enqueue(store, probe("late"));
    const outcome = await outbox.waitFor(late);
    expect(outcome.status).toBe("confirmed");
    expect((await findOutboxRow(store, late))?.nonce).toBe(nonceBefore + 3);

    // The same transactions (same hashes: the recorded bytes, not new signatures) are on chain again.
    for (const hash of hashes) {
      expect((await devnet.publicClient.getTransactionReceipt({ hash })).status).toBe("success");
    }
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 4);
    for (const id of [...early, late]) expect(await deliveries(store, id)).toBe(1);
    expect(await fillers(store)).toBe(0);
  }, 120_000);

  it("fills a lost nonce no row holds with a recorded zero-value transfer to self, and sends the confirmed row above it again", async () => {
    const store = await freshStore();
    const key = keyOf(1);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    const snapshot = await devnet.snapshot();
    // A transaction of the key the outbox never recorded takes a nonce (what a rewind may lose too).
    const wallet = devnet.walletClient(devnet.accounts[1]!);
    const foreign = await wallet.sendTransaction({ to: key.address, value: 0n });
    await devnet.publicClient.waitForTransactionReceipt({ hash: foreign });
    await outbox.start();
    const first = await outbox.enqueue(store, probe("first"));
    const firstOutcome = await outbox.waitFor(first);
    expect((await findOutboxRow(store, first))?.nonce).toBe(nonceBefore + 1);

    await devnet.revert(snapshot);
    const late = await outbox.enqueue(store, probe("late"));
    expect((await outbox.waitFor(late)).status).toBe("confirmed");

    // The filler is mined before `late` (a lower nonce), but its own row may record that a moment later.
    const fillerRows = () =>
      store.query<{ nonce: string; status: string; tx_hash: Hash }>(
        "SELECT nonce, status, tx_hash FROM tx_outbox WHERE kind = $1 AND sender = $2",
        [FILLER_KIND, key.address.toLowerCase()],
      );
    await expect
      .poll(async () => (await fillerRows()).map((r) => [Number(r.nonce), r.status]), { timeout: 20_000 })
      .toEqual([[nonceBefore, "confirmed"]]);
    const filler = await fillerRows();
    const fillerTx = await devnet.publicClient.getTransaction({ hash: filler[0]!.tx_hash });
    expect([fillerTx.to, fillerTx.value]).toEqual([key.address.toLowerCase(), 0n]);
    // The confirmed row's own bytes, not a new signature, hold its nonce again.
    expect(
      (await devnet.publicClient.getTransactionReceipt({ hash: firstOutcome.hash as Hash })).status,
    ).toBe("success");
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 3);
    for (const id of [first, late]) expect(await deliveries(store, id)).toBe(1);
  }, 120_000);

  it("broadcasts again the open rows a node dropped from its mempool, with their recorded bytes", async () => {
    const store = await freshStore();
    const key = keyOf(3);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    // The node loses both before mining them.
    const ids = await withoutAutomine(() => dropTwo(store, outbox, ["a", "b"]));
    await expectRebroadcast(store, outbox, ids);
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 2);
    expect(await fillers(store)).toBe(0);
  }, 120_000);

  it("asks the chain as soon as a block is mined without the rows it broadcast, not after stuckAfterMs", async () => {
    const store = await freshStore();
    const key = keyOf(4);
    // The time rule alone would wait two minutes: only a block passing the rows over can start the
    // repair within this test's time.
    const { client, checks } = countingClient();
    const outbox = outboxOver(store, key, { stuckAfterMs: 120_000, client });
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    const ids = await withoutAutomine(async () => {
      const dropped = await dropTwo(store, outbox, ["c", "d"]);
      // One block without them could be one they reached the node too late for: no check yet (two
      // head reads' worth of waiting).
      await devnet.testClient.mine({ blocks: 1 });
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      expect(checks()).toBe(0);
      // The next is a whole block after the one they could first have been in.
      await devnet.testClient.mine({ blocks: 1 });
      return dropped;
    });
    await expectRebroadcast(store, outbox, ids);
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 2);
  }, 20_000);

  it("costs no check while no block is mined, however long a row waits", async () => {
    const store = await freshStore();
    const key = keyOf(4);
    const { client, checks } = countingClient();
    const outbox = outboxOver(store, key, { stuckAfterMs: 120_000, client });
    const id = await withoutAutomine(async () => {
      await outbox.start();
      const queued = await outbox.enqueue(store, probe("e"));
      await outbox.waitForHash(queued);
      // Three head reads' worth of waiting on a chain that mines nothing.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      expect(checks()).toBe(0);
      return queued;
    });
    await devnet.testClient.mine({ blocks: 1 });
    expect((await outbox.waitFor(id)).status).toBe("confirmed");
  }, 20_000);
});
