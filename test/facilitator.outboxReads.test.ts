/**
 * What the outbox reads per payment. A signing pass a producer asked for (`outbox.wake()` after its
 * rows committed) used to look first whether any row was queued, and every finished row woke the
 * worker into another pass of looks (queued rows, other workers' open rows) just as the payment's
 * outcome was being answered. Now a settlement batch is signed in the transaction that claims it (the
 * outbox's `signingTransaction`), a payment that finds the engine idle is inserted in that same
 * transaction, and a finished row wakes nobody.
 */
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { recordedStore, TRANSACTION_MARK } from "./support/recordedStore.ts";

describe("outbox reads per payment", { timeout: 90_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let tf: TestFacilitator;
  const seen: string[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 4 });
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    // The outbox's periodic look (every `reconcileIntervalMs` while rows are in flight) far away, so
    // that the looks counted below are the ones a payment causes, not the timer's on a slow machine.
    tf = await startTestFacilitator(devnet, {
      store: recordedStore(store, seen),
      settlement: { reconcileIntervalMs: 60_000 },
    });
  });
  afterAll(async () => {
    await tf?.stop();
    await store?.close();
    await devnet?.stop();
  });

  it("inserts, claims and signs a lone payment in one transaction, and looks for nothing once it settled", async () => {
    const payTo = devnet.accounts[2]!.address;
    const payers = [];
    for (let i = 0; i < 5; i++) {
      const privateKey = generatePrivateKey();
      const account = privateKeyToAccount(privateKey);
      await devnet.fund(account.address, { usd: 1_000_000n });
      payers.push(
        await signTestPayment(
          devnet,
          { address: account.address, privateKey, account },
          { payTo, amount: 10_000n },
        ),
      );
    }
    const from = seen.length;
    for (const signedPayment of payers) {
      const response = await fetch(`${tf.url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment }),
      });
      expect(response.status).toBe(200);
    }
    const after = seen.slice(from);
    const looks = after.filter((sql) =>
      /SELECT 1 FROM tx_outbox WHERE status = 'queued'|SELECT id FROM tx_outbox WHERE status IN/.test(sql),
    );
    // Before: a look before each signing pass and two after each row settled (15 here). Now none:
    // the worker's periodic pass, the only other one, is a minute away.
    expect(looks).toEqual([]);
    // Each batch is signed in the transaction that claims it: inserted signed, never queued first and
    // signed by a second transaction of the worker.
    expect(after.filter((sql) => /INSERT INTO tx_outbox .*'signed'/s.test(sql))).toHaveLength(5);
    expect(
      after.filter((sql) => /UPDATE tx_outbox SET status = 'signed'|WHERE status = 'queued'/.test(sql)),
    ).toEqual([]);
    // Two store transactions per payment: claim and sign, then its outcome (three before: the claim,
    // the worker's signing, the outcome).
    expect(after.filter((sql) => sql === TRANSACTION_MARK)).toHaveLength(10);
    // Each payment found the engine idle: its row went in already claimed, first thing in the
    // transaction that signs its batch, and the queue was never read (before: its own insert, then a
    // read of the queue's head, then the claim).
    expect(after.filter((sql) => /count\(\*\) OVER \(PARTITION BY token\)/.test(sql))).toEqual([]);
    // Nor was the payment looked up by its nonce before its insert: a new payment goes from its checks
    // straight to the insert, which is what finds one already recorded.
    expect(after.filter((sql) => /FROM payments WHERE nonce = (\$1|ANY)/.test(sql))).toEqual([]);
    const inserts = after.flatMap((sql, i) => (/INSERT INTO payments/.test(sql) ? [i] : []));
    expect(inserts).toHaveLength(5);
    for (const i of inserts) {
      expect(after[i]).toMatch(/'submitted', batch\.id/);
      expect(after[i - 1]).toBe(TRANSACTION_MARK);
    }
  });
});
