/**
 * The transaction outbox against a real devnet and store: several workers over one store never share a
 * nonce or send a row twice; a row recorded and never broadcast is sent with its recorded bytes by the
 * next worker; a row whose nonce another transaction took ends `dropped`; a renewal whose keeper died
 * after recording it is collected exactly once.
 */
import pino from "pino";
import { type Address, type Hash, TransactionReceiptNotFoundError, zeroAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import {
  createOutbox,
  type OutboxClient,
  type OutboxFaults,
  receiptPollsFor,
} from "../src/facilitator/outbox/createOutbox.ts";
import { createGasKey, type GasKey } from "../src/facilitator/outbox/gasKey.ts";
import { findOutboxRow } from "../src/facilitator/outbox/outboxRecords.ts";
import type { Outbox, OutboxOutcome } from "../src/facilitator/outbox/outboxTypes.ts";
import { createSubscriptionsModule } from "../src/facilitator/subscriptionsModule.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { recordedStore } from "./support/recordedStore.ts";

const logger = pino({ level: "silent" });
let devnet: Devnet;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
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
  faults?: OutboxFaults,
  client: OutboxClient = devnet.publicClient,
): Outbox {
  const outbox = createOutbox({
    store,
    client,
    key,
    clock: systemClock,
    logger,
    reconcileIntervalMs: 100,
    staleMs: 500,
    faults,
  });
  const outcomes: OutboxOutcome[] = [];
  outbox.handle("probe", async (outcome, commit) => {
    await commit(async (tx) => {
      // The handler's write commits with the row's final state: count deliveries in the store.
      await tx.query("INSERT INTO events (type, data) VALUES ('test.outbox_probe', $1)", [
        { id: outcome.id, status: outcome.status },
      ]);
    });
    outcomes.push(outcome);
  });
  return outbox;
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

describe("transaction outbox", () => {
  it("sends every row once under distinct consecutive nonces when two workers share a store and a key", async () => {
    const store = await freshStore();
    const key = keyOf(1);
    // Two outboxes over one store and one key, each with a nonce manager of its own: as two instances.
    const a = outboxOver(store, key);
    const b = outboxOver(store, keyOf(1));
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    await a.start();
    await b.start();
    try {
      const ids: number[] = [];
      for (let i = 0; i < 12; i++) {
        const target = i % 2 === 0 ? a : b;
        ids.push(await target.enqueue(store, probe(`p${i}`)));
      }
      const outcomes = await Promise.all(ids.map((id, i) => (i % 2 === 0 ? b : a).waitFor(id)));
      expect(outcomes.map((o) => o.status)).toEqual(ids.map(() => "confirmed"));
      const rows = await Promise.all(ids.map((id) => findOutboxRow(store, id)));
      const nonces = rows.map((r) => r!.nonce!).sort((x, y) => x - y);
      expect(nonces).toEqual(ids.map((_, i) => nonceBefore + i));
      for (const id of ids) expect(await deliveries(store, id)).toBe(1);
      expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 12);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  it("broadcasts the recorded bytes of a row whose worker died before broadcasting, not a new signature", async () => {
    const store = await freshStore();
    const key = keyOf(2);
    let recorded: Hash | null = null;
    const dying = outboxOver(store, key, {
      afterSign: (row) => {
        recorded = row.tx_hash;
        throw new Error("simulated crash after record");
      },
    });
    const id = await dying.enqueue(store, probe("crash"));
    await expect(dying.waitFor(id)).rejects.toThrow("simulated crash");
    expect(recorded).not.toBeNull();
    expect((await findOutboxRow(store, id))?.status).toBe("signed");
    await expect(devnet.publicClient.getTransaction({ hash: recorded! })).rejects.toThrow();

    const next = outboxOver(store, keyOf(2));
    const outcome = await next.waitFor(id);
    expect(outcome).toMatchObject({ status: "confirmed", hash: recorded });
    expect(await deliveries(store, id)).toBe(1);
  }, 60_000);

  it("ends a row dropped as displaced when another transaction took its nonce, and the next row still goes", async () => {
    const store = await freshStore();
    const key = keyOf(3);
    const dying = outboxOver(store, key, {
      afterSign: () => {
        throw new Error("simulated crash after record");
      },
    });
    const id = await dying.enqueue(store, probe("displaced"));
    await expect(dying.waitFor(id)).rejects.toThrow("simulated crash");
    // Someone else uses the key's next nonce (an operator sending by hand, say).
    const hash = await devnet
      .walletClient(devnet.accounts[3]!)
      .sendTransaction({ to: zeroAddress, value: 0n });
    await devnet.publicClient.waitForTransactionReceipt({ hash });

    const next = outboxOver(store, keyOf(3));
    expect(await next.waitFor(id)).toMatchObject({ status: "dropped", reason: "displaced" });
    const after = await next.enqueue(store, probe("after"));
    expect(await next.waitFor(after)).toMatchObject({ status: "confirmed" });
    expect(await deliveries(store, id)).toBe(1);
  }, 60_000);

  it("drops a row the node refuses for good and fills its nonce, so the rows after it are mined", async () => {
    const store = await freshStore();
    const key = keyOf(2);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    // Below the 21 000 gas any transaction needs: signed and recorded, then refused by the node.
    const refused = await outbox.enqueue(store, { ...probe("too little gas"), gas: 1_000n });
    const after = await outbox.enqueue(store, probe("after"));
    expect(await outbox.waitFor(refused)).toMatchObject({ status: "dropped", reason: "refused" });
    expect(await outbox.waitFor(after)).toMatchObject({ status: "confirmed" });
    const filler = await store.query<{ nonce: string; status: string }>(
      "SELECT nonce::text AS nonce, status FROM tx_outbox WHERE kind = 'nonce-filler'",
    );
    expect(filler).toEqual([{ nonce: String(nonceBefore), status: "confirmed" }]);
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 2);
    expect(await deliveries(store, refused)).toBe(1);
  }, 60_000);

  it("signs a call in its producer's transaction, and gives its nonce back when that transaction rolls back", async () => {
    const store = await freshStore();
    const key = keyOf(2);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    await expect(
      outbox.signingTransaction(async (_tx, enqueue) => {
        await enqueue(probe("rolled back"));
        throw new Error("the producer failed after its call was signed");
      }),
    ).rejects.toThrow("the producer failed");
    expect(await store.query("SELECT id FROM tx_outbox")).toEqual([]);
    // Signed in the producer's transaction with the nonce the rolled-back call had taken (a gap there
    // would leave it unmined for good), and broadcast once that transaction committed, with no wake.
    const id = await outbox.signingTransaction(async (tx, enqueue) => {
      const queued = await enqueue(probe("committed"));
      const inside = await tx.query<{ status: string; nonce: string }>(
        "SELECT status, nonce::text AS nonce FROM tx_outbox WHERE id = $1",
        [queued],
      );
      expect(inside).toEqual([{ status: "signed", nonce: String(nonceBefore) }]);
      return queued;
    });
    expect(await outbox.waitFor(id)).toMatchObject({ status: "confirmed" });
    expect(await deliveries(store, id)).toBe(1);
    expect(await devnet.publicClient.getTransactionCount({ address: key.address })).toBe(nonceBefore + 1);
    await expect(
      outbox.signingTransaction((_tx, enqueue) => enqueue({ ...probe("no handler"), kind: "unknown" })),
    ).rejects.toThrow('register a handler for outbox kind "unknown"');
  }, 60_000);

  it("stores the key's next nonce with each row it signs in a producer's transaction, in no statement of its own", async () => {
    const seen: string[] = [];
    const store = recordedStore(await freshStore(), seen);
    const key = keyOf(2);
    const outbox = outboxOver(store, key);
    const nonceBefore = await devnet.publicClient.getTransactionCount({ address: key.address });
    const from = seen.length;
    const ids = await outbox.signingTransaction(async (_tx, enqueue) => [
      await enqueue(probe("first of two")),
      await enqueue(probe("second of two")),
    ]);
    // The lock that takes the nonce, then one statement per row; nothing else touches tx_senders.
    expect(seen.slice(from).filter((sql) => /tx_senders/.test(sql))).toHaveLength(3);
    expect(seen.slice(from).filter((sql) => /^\s*UPDATE tx_senders/.test(sql))).toEqual([]);
    const senders = await store.query<{ next_nonce: string }>(
      "SELECT next_nonce::text AS next_nonce FROM tx_senders WHERE sender = $1",
      [key.address.toLowerCase()],
    );
    expect(senders).toEqual([{ next_nonce: String(nonceBefore + 2) }]);
    for (const id of ids) expect(await outbox.waitFor(id)).toMatchObject({ status: "confirmed" });
    // A call signed afterwards (by another process reading the stored nonce as well) takes the next one.
    const later = outboxOver(store, keyOf(2));
    const id = await later.enqueue(store, probe("after both"));
    expect(await later.waitFor(id)).toMatchObject({ status: "confirmed" });
    const row = await store.query<{ nonce: string }>(
      "SELECT nonce::text AS nonce FROM tx_outbox WHERE id = $1",
      [id],
    );
    expect(row).toEqual([{ nonce: String(nonceBefore + 2) }]);
  }, 60_000);
});

describe("receipts of fresh transactions", () => {
  /**
   * The devnet's client with a node that shows each receipt only from its third look, as a node that
   * answers a send before it seals the block (anvil's automine, slower as its chain grows), and a
   * count of the waits on new blocks.
   */
  /**
   * The devnet's client polling every `pollingInterval` ms, whose receipts show from look `misses + 1`
   * on: such a look waits for the block behind it, since anvil may seal it a moment after the send
   * (later on a loaded machine), which would be a miss the test did not ask for.
   */
  function slowReceipts(pollingInterval: number, misses = 2) {
    const base = devnet.publicClient;
    const looks = new Map<string, number>();
    const waited: string[] = [];
    const client: OutboxClient = {
      ...base,
      pollingInterval,
      getTransactionReceipt: async (args) => {
        const seen = (looks.get(args.hash) ?? 0) + 1;
        looks.set(args.hash, seen);
        if (seen <= misses) throw new TransactionReceiptNotFoundError({ hash: args.hash });
        return base.waitForTransactionReceipt({ hash: args.hash, timeout: 10_000 });
      },
      waitForTransactionReceipt: (args) => {
        waited.push(args.hash);
        return base.waitForTransactionReceipt(args);
      },
    };
    return { client, looks, waited };
  }

  /**
   * Sends one probe through an outbox over `node`'s client: it must end confirmed and delivered once.
   * Returns the transaction's hash and how many times its broadcast was recorded.
   */
  async function probeThrough(
    node: ReturnType<typeof slowReceipts>,
    owner: string,
  ): Promise<{ hash: string; broadcastRecords: number }> {
    const seen: string[] = [];
    const store = recordedStore(await freshStore(), seen);
    const outbox = outboxOver(store, keyOf(1), undefined, node.client);
    try {
      const id = await outbox.enqueue(store, probe(owner));
      expect(await outbox.waitFor(id)).toMatchObject({ status: "confirmed" });
      expect(await deliveries(store, id)).toBe(1);
      return {
        hash: (await findOutboxRow(store, id))!.tx_hash!,
        broadcastRecords: seen.filter((sql) => /SET status = 'broadcast'/.test(sql)).length,
      };
    } finally {
      await outbox.stop();
    }
  }

  it("finds a receipt the node shows a moment after the send with short looks, not a wait on new blocks", async () => {
    const node = slowReceipts(50);
    const { hash, broadcastRecords } = await probeThrough(node, "slow receipt");
    expect(node.looks.get(hash)).toBeGreaterThanOrEqual(3);
    expect(node.waited).toEqual([]);
    // The first look missed: the broadcast is recorded while the looks go on.
    expect(broadcastRecords).toBe(1);
  }, 60_000);

  it("goes from signed to its outcome with no write between when the first look finds the receipt", async () => {
    const node = slowReceipts(50, 0);
    const { hash, broadcastRecords } = await probeThrough(node, "mined at once");
    expect(node.looks.get(hash)).toBe(1);
    expect(node.waited).toEqual([]);
    expect(broadcastRecords).toBe(0);
  }, 60_000);

  it("answers waitForHash once the row is broadcast, though a row mined at the first look stays signed until its outcome", async () => {
    const base = devnet.publicClient;
    // A node whose first look always finds the receipt (it waits for the block behind the look).
    const client: OutboxClient = {
      ...base,
      pollingInterval: 50,
      getTransactionReceipt: (args) => base.waitForTransactionReceipt({ hash: args.hash }),
    };
    const store = await freshStore();
    const outbox = outboxOver(store, keyOf(3), undefined, client);
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    // An outcome that waits for the test: the row stays open meanwhile.
    outbox.handle("held", async (_outcome, commit) => {
      await released;
      await commit(async () => {});
    });
    try {
      const id = await outbox.enqueue(store, { ...probe("held"), kind: "held" });
      const signed = await Promise.race([
        outbox.waitForHash(id),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 5_000)),
      ]);
      const row = await findOutboxRow(store, id);
      expect(row?.status).toBe("signed");
      expect(signed).toEqual({ id, hash: row?.tx_hash, nonce: row?.nonce });
    } finally {
      release();
      await outbox.flush();
    }
  }, 60_000);

  it("waits on new blocks at once when the client polls slowly (a chain with real block times)", async () => {
    const node = slowReceipts(1_000);
    const { hash, broadcastRecords } = await probeThrough(node, "slow chain");
    expect(node.waited).toEqual([hash]);
    expect(broadcastRecords).toBe(1);
  }, 60_000);

  it("looks at doubling delays that fit in a fast polling interval, and not at all past 250 ms", () => {
    expect(receiptPollsFor(50)).toEqual([0, 2, 4, 8, 16]);
    expect(receiptPollsFor(250)).toEqual([0, 2, 4, 8, 16, 32, 64]);
    expect(receiptPollsFor(251)).toEqual([]);
    expect(receiptPollsFor(1_000)).toEqual([]);
    expect(receiptPollsFor(undefined)).toEqual([]);
  });
});

describe("renewals through the outbox", () => {
  let tf: TestFacilitator;

  beforeAll(async () => {
    // No keeper of its own: the test's keepers are the only ones that collect, and the facilitator's
    // outbox serves no renewal row until the test registers its keeper there, after the crash. Else the
    // facilitator's keeper may collect first, or its outbox (woken by the row's notification) sign the
    // renewal before the crashing outbox does, and no crash happens.
    tf = await startTestFacilitator(devnet, {
      gasAccount: devnet.accounts[4]!,
      modules: [createSubscriptionsModule({ keeper: false })],
    });
  });

  afterAll(async () => {
    await tf?.stop();
  });

  it("collects a renewal exactly once, with the recorded transaction, when its keeper died before broadcasting it", async () => {
    const DAY = 86_400;
    const price = 7_000_000n;
    const provider = devnet.accounts[5]!;
    const planHash = await createPlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: price,
      interval: BigInt(30 * DAY),
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({ hash: planHash }),
    );
    const subscriber = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(subscriber.address, { usd: 3n * price });
    const client = createFacilitatorClient({ url: tf.url, fetch });
    await subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 0n });
    const balance = () =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: subscriber.address });
    const before = await balance();
    await devnet.advanceTime(30 * DAY + 60);

    const ctx = tf.facilitator.context;
    const indexer = createSubscriptionIndexer(ctx);
    let recorded: Hash | null = null;
    const dying = createOutbox({
      store: ctx.store,
      client: ctx.publicClient,
      key: ctx.gas,
      clock: systemClock,
      logger,
      faults: {
        afterSign: (row) => {
          recorded = row.tx_hash;
          throw new Error("simulated crash after record");
        },
      },
    });
    await expect(createRenewalKeeper(ctx, { indexer, outbox: dying }).runOnce()).rejects.toThrow(
      "simulated crash",
    );
    expect(await balance()).toBe(before);

    // The facilitator's own outbox finds the abandoned row once it is stale and sends its bytes; a keeper
    // run meanwhile leaves the subscription alone, as its renewal is on its way.
    const keeper = createRenewalKeeper(ctx, { indexer });
    const meanwhile = await keeper.runOnce();
    expect(meanwhile.attempted).toEqual([]);
    // The row's notification may have come while it was still queued, leaving the outbox asleep until its
    // 30 s backstop: look now, as an instance whose outbox served renewals all along would have.
    ctx.outbox.wake();
    for (let i = 0; i < 200 && (await balance()) === before; i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(await balance()).toBe(before - price);
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: recorded! });
    expect(receipt.status).toBe("success");
    const again = await keeper.runOnce();
    expect(again.attempted).toEqual([]);
    expect(await balance()).toBe(before - price);
  }, 90_000);
});
