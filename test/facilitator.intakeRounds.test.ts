/**
 * The settlement engine's intake under a burst (settlement/coalescer.ts): payments that arrive
 * together share one nonce lookup and one insert per round instead of one of each per payment, and
 * sharing a statement changes no answer — a payment reusing another's nonce in the same round is
 * still refused, and the row stored is the payment that was answered.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { recordedStore } from "./support/recordedStore.ts";

describe("settlement intake under a burst", { timeout: 90_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let tf: TestFacilitator;
  let payer: DevnetAccount;
  const seen: string[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 4 });
    payer = devnet.accounts[1]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    // From its RPC URL, as `tollgate facilitator` builds it: simulations that wait for one another leave
    // as one batch (src/chain/batchingHttp.ts) and come back together.
    tf = await startTestFacilitator(devnet, { store: recordedStore(store, seen), rpcUrl: devnet.rpcUrl });
  });
  afterAll(async () => {
    await tf?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const count = (pattern: RegExp, from: number) => seen.slice(from).filter((sql) => pattern.test(sql)).length;
  const inserts = /^INSERT INTO payments/;
  const lookups = /FROM payments WHERE nonce = (\$1|ANY)/;

  it("answers every payment of a burst with its own proof, in fewer statements than payments", async () => {
    const payTo = devnet.accounts[2]!.address;
    const payments = [];
    for (let i = 0; i < 30; i++)
      payments.push(await signTestPayment(devnet, payer, { payTo, amount: 10_000n }));
    const from = seen.length;
    // Straight to the engine, all in one turn (over HTTP the requests of one test process arrive one
    // by one, each check done before the next request is read).
    const answers = await Promise.all(payments.map((p) => tf.facilitator.engine.authorize(p)));
    expect(answers.map((a) => a.proof.memo)).toEqual(payments.map((p) => p.memo));
    expect(answers.map((a) => a.row.nonce)).toEqual(payments.map((p) => p.authorization.nonce.toLowerCase()));
    const rows = await store.query<{ nonce: string; status: string }>(
      "SELECT nonce, status FROM payments WHERE nonce = ANY($1::text[])",
      [payments.map((p) => p.authorization.nonce.toLowerCase())],
    );
    expect(rows.map((r) => r.status)).toEqual(payments.map(() => "settled"));
    // One of each per payment before; now the first arrival's alone and the rest in shared rounds.
    expect(count(lookups, from)).toBeLessThanOrEqual(3);
    expect(count(inserts, from)).toBeLessThanOrEqual(10);
  });

  it("still refuses a payment reusing another's nonce when both arrive in one burst, and stores the one it answered", async () => {
    const payTo = devnet.accounts[2]!.address;
    const fillers = [];
    for (let i = 0; i < 6; i++)
      fillers.push(await signTestPayment(devnet, payer, { payTo, amount: 10_000n }));
    const payment = await signTestPayment(devnet, payer, { payTo, amount: 10_000n });
    const rival = await signTestPayment(devnet, payer, {
      payTo,
      amount: 10_000n,
      memo: payment.memo,
      validBefore: BigInt(payment.authorization.validBefore) - 1n,
    });
    const from = seen.length;
    const answers = await Promise.allSettled(
      [...fillers, payment, rival].map((p) => tf.facilitator.engine.authorize(p)),
    );
    expect(answers.slice(0, 6).map((a) => a.status)).toEqual(fillers.map(() => "fulfilled"));
    const pair = answers.slice(6);
    expect(pair.map((a) => a.status).sort()).toEqual(["fulfilled", "rejected"]);
    const refused = pair.find((a) => a.status === "rejected") as PromiseRejectedResult;
    expect((refused.reason as { code: string }).code).toBe("NonceAlreadyUsed");
    // Both reached the insert together (the rounds are shared), and one statement held one of them.
    expect(count(inserts, from)).toBeLessThanOrEqual(3);
    const winner = pair[0]!.status === "fulfilled" ? payment : rival;
    const [row] = await store.query<{ valid_before: string; signature: string; status: string }>(
      "SELECT valid_before, signature, status FROM payments WHERE nonce = $1",
      [payment.authorization.nonce.toLowerCase()],
    );
    expect(row).toEqual({
      valid_before: winner.authorization.validBefore,
      signature: winner.signature.toLowerCase(),
      status: "settled",
    });
  });
});
