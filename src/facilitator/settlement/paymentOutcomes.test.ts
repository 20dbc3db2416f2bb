import { randomBytes } from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { insertTestPayment } from "../../../test/support/paymentRows.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { findPaymentByNonce, type PaymentRow } from "../paymentRecords.ts";
import { generateProofKey } from "../proofKeys.ts";
import {
  markPaymentFailed,
  markPaymentsSettled,
  type PaymentOutcomeDeps,
  requeuePayment,
} from "./paymentOutcomes.ts";

const hex = (bytes: number) => `0x${randomBytes(bytes).toString("hex")}` as const;
const TX = `0x${"ab".repeat(32)}` as const;

describe("payment outcomes", () => {
  let store: Store;
  const deps: PaymentOutcomeDeps = {
    proofKey: () => generateProofKey().key,
    proofTtlSeconds: 600,
    logger: pino({ level: "silent" }),
  };
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  });
  afterAll(async () => {
    await store?.close();
  });

  async function newBatch(): Promise<number> {
    const [row] = await store.query<{ id: string }>(
      "INSERT INTO settlement_batches (network, token, status) VALUES ('eip155:31337', $1, 'submitted') RETURNING id",
      [hex(20)],
    );
    return Number(row?.id);
  }
  /** A payment claimed into `batchId`, as the claim's RETURNING * gives it. */
  async function claimed(batchId: number, memo?: string): Promise<PaymentRow> {
    const inserted = await insertTestPayment(store, memo);
    await store.query("UPDATE payments SET status = 'submitted', batch_id = $2, attempts = 1 WHERE id = $1", [
      inserted.id,
      batchId,
    ]);
    return (await findPaymentByNonce(store, inserted.nonce))!;
  }
  const eventsFor = async (nonce: string) =>
    (
      await store.query<{ type: string }>("SELECT type FROM events WHERE data->>'nonce' = $1 ORDER BY id", [
        nonce,
      ])
    ).map((e) => e.type);

  it("settles a batch's rows and closes it in one statement, leaving a row that moved to another batch alone", async () => {
    const first = await newBatch();
    const a = await claimed(first, "eyJ0ZXN0IjoxfQ.BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc");
    const b = await claimed(first);
    const c = await claimed(first);
    // Since the claim, another instance put `b` back in the queue and claimed it into a batch of its own.
    const second = await newBatch();
    await store.query("UPDATE payments SET batch_id = $2 WHERE id = $1", [b.id, second]);

    const settled = await store.transaction((tx) =>
      markPaymentsSettled(
        deps,
        tx,
        [a, b, c].map((row) => ({ row, settled: { txHash: TX, blockNumber: 7n, nowSeconds: 1_000 } })),
        { close: { id: first, status: "confirmed", txHash: TX, blockNumber: 7n } },
      ),
    );
    expect(settled.map((r) => r.nonce)).toEqual([a.nonce, c.nonce]);
    expect(settled[0]).toMatchObject({ status: "settled", tx_hash: TX, block_number: 7n });
    // A Tollgate payment gets its proof; an x402 payment none (SQL NULL, not JSON null).
    expect(settled[0]?.proof?.memo).toBe("eyJ0ZXN0IjoxfQ.BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc");
    expect(settled[1]?.proof).toBeNull();
    const [noProof] = await store.query<{ absent: boolean }>(
      "SELECT proof IS NULL AS absent FROM payments WHERE id = $1",
      [c.id],
    );
    expect(noProof?.absent).toBe(true);
    expect(await eventsFor(a.nonce)).toEqual(["payment.settled"]);
    expect(await eventsFor(c.nonce)).toEqual(["payment.settled"]);
    expect(await eventsFor(b.nonce)).toEqual([]);
    expect((await findPaymentByNonce(store, b.nonce))?.status).toBe("submitted");
    const [batch] = await store.query<{ status: string; tx_hash: string; block_number: string }>(
      "SELECT status, tx_hash, block_number FROM settlement_batches WHERE id = $1",
      [first],
    );
    expect(batch).toEqual({ status: "confirmed", tx_hash: TX, block_number: "7" });
  });

  it("fails or requeues a row only while it is submitted in the batch it was claimed into", async () => {
    const first = await newBatch();
    const stale = await claimed(first);
    const second = await newBatch();
    await store.query("UPDATE payments SET batch_id = $2 WHERE id = $1", [stale.id, second]);
    const refusal = new TollgateError("InsufficientFunds", "no funds");

    await store.transaction((tx) => markPaymentFailed(deps, tx, stale, refusal, TX));
    await store.transaction((tx) => requeuePayment(tx, stale));
    expect(await findPaymentByNonce(store, stale.nonce)).toMatchObject({
      status: "submitted",
      batch_id: second,
    });
    expect(await eventsFor(stale.nonce)).toEqual([]);

    // The row as it is now (in the second batch) is failed, with its event.
    const fresh = (await findPaymentByNonce(store, stale.nonce))!;
    await store.transaction((tx) => markPaymentFailed(deps, tx, fresh, refusal, TX));
    expect(await findPaymentByNonce(store, stale.nonce)).toMatchObject({
      status: "failed",
      failure_code: "InsufficientFunds",
    });
    expect(await eventsFor(stale.nonce)).toEqual(["payment.failed"]);

    const other = await claimed(second);
    await store.transaction((tx) => requeuePayment(tx, other, { cap: 2 }));
    expect(await findPaymentByNonce(store, other.nonce)).toMatchObject({ status: "pending", batch_id: null });
  });

  it("closes a batch that settled nothing", async () => {
    const batchId = await newBatch();
    const settled = await store.transaction((tx) =>
      markPaymentsSettled(deps, tx, [], {
        close: { id: batchId, status: "failed", txHash: null, blockNumber: null },
      }),
    );
    expect(settled).toEqual([]);
    const [batch] = await store.query<{ status: string }>(
      "SELECT status FROM settlement_batches WHERE id = $1",
      [batchId],
    );
    expect(batch?.status).toBe("failed");
  });
});
