import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { insertTestPayment } from "../../../test/support/paymentRows.ts";
import { systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { SqlParam, Store } from "../../store/store.ts";
import type { PaymentRow } from "../paymentRecords.ts";
import { createOutcomeWaiters } from "./outcomeWaiters.ts";

const hex = (bytes: number) => `0x${randomBytes(bytes).toString("hex")}` as const;
const TX = `0x${"cd".repeat(32)}` as const;
const POLL_MS = 50;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("outcome waiters", () => {
  let store: Store;
  /** The store as the waiters see it: every statement counted, and made to fail while `down`. */
  let statements: string[] = [];
  let down = false;
  /** Called once, with the next shared look's rows read, before the look is answered. */
  let afterNextLookRead: (() => Promise<void>) | undefined;
  let counted: Store;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    counted = {
      ...store,
      query<Row>(sql: string, params?: readonly SqlParam[]): Promise<Row[]> {
        statements.push(sql);
        if (down) return Promise.reject(new Error("connection refused"));
        const hook = sql.includes("outcome_batch_size") ? afterNextLookRead : undefined;
        if (hook !== undefined) {
          afterNextLookRead = undefined;
          return store.query<Row>(sql, params).then(async (rows) => {
            await hook();
            return rows;
          });
        }
        return store.query<Row>(sql, params);
      },
    };
  });
  afterAll(async () => {
    await store?.close();
  });

  const pending = () => insertTestPayment(store);
  /** What another instance's outcome leaves behind: the rows settled in a batch of `count` items. */
  async function settleElsewhere(rows: readonly PaymentRow[]): Promise<number> {
    const [batch] = await store.query<{ id: string }>(
      "INSERT INTO settlement_batches (network, token, status, item_count) VALUES ('eip155:31337', $1, 'confirmed', $2) RETURNING id",
      [hex(20), rows.length],
    );
    await store.query(
      "UPDATE payments SET status = 'settled', batch_id = $2, tx_hash = $3, block_number = 7, settled_at = now() WHERE id = ANY($1::bigint[])",
      [rows.map((r) => r.id), batch?.id, TX],
    );
    return Number(batch?.id);
  }

  it("looks up every waiting payment in one statement a round, and answers each from it", async () => {
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: POLL_MS });
    const rows = await Promise.all(Array.from({ length: 40 }, pending));
    statements = [];
    const answers = rows.map((row) => waiters.waitForOutcome(row, 30_000));
    await sleep(POLL_MS * 5);
    // Five rounds or so went by with 40 requests waiting: a handful of statements, not 40 per round.
    expect(statements.length).toBeGreaterThanOrEqual(2);
    expect(statements.length).toBeLessThanOrEqual(7);

    const batchId = await settleElsewhere(rows);
    const outcomes = await Promise.all(answers);
    for (const [i, outcome] of outcomes.entries()) {
      expect(outcome.row.nonce).toBe(rows[i]?.nonce);
      expect(outcome.row.status).toBe("settled");
      expect(outcome.row.tx_hash).toBe(TX);
      expect(outcome.row.batch_id).toBe(batchId);
      expect(outcome.batchSize).toBe(40);
      expect(Object.keys(outcome.row)).not.toContain("outcome_batch_size");
    }
    // Nobody waits any more: no round runs, so no statement either.
    const after = statements.length;
    await sleep(POLL_MS * 4);
    expect(statements.length).toBe(after);
  });

  it("answers at once, without a statement, from the row this process settled", async () => {
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: 60_000 });
    const row = await pending();
    statements = [];
    const answer = waiters.waitForOutcome(row, 30_000);
    const settled: PaymentRow = { ...row, status: "settled", tx_hash: TX };
    waiters.notify(row.nonce, { row: settled, batchSize: 3 });
    await expect(answer).resolves.toEqual({ row: settled, batchSize: 3 });
    expect(statements).toEqual([]);
  });

  it("looks at once when woken without a row: a failed payment is refused with its reason, a requeued one waits on", async () => {
    // The round is a minute away: only the wake-up can find these outcomes within the test.
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: 60_000 });
    const failing = await pending();
    const requeued = await pending();
    const failed = waiters.waitForOutcome(failing, 30_000);
    const waiting = waiters.waitForOutcome(requeued, 30_000);
    let requeuedDone = false;
    void waiting.then(() => (requeuedDone = true));
    await store.query(
      "UPDATE payments SET status = 'failed', failure_code = 'InsufficientFunds', failure_message = 'the payer cannot cover it' WHERE id = $1",
      [failing.id],
    );
    waiters.notify(failing.nonce);
    waiters.notify(requeued.nonce);
    const error = await failed.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TollgateError);
    expect((error as TollgateError).code).toBe("InsufficientFunds");
    expect((error as TollgateError).message).toBe("the payer cannot cover it");
    await sleep(50);
    expect(requeuedDone).toBe(false);
    await settleElsewhere([requeued]);
    waiters.notify(requeued.nonce);
    await expect(waiting).resolves.toMatchObject({ row: { status: "settled" }, batchSize: 1 });
  });

  it("times out with a retryable 503 that names the payment", async () => {
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: POLL_MS });
    const row = await pending();
    const started = Date.now();
    const error = await waiters.waitForOutcome(row, 120).catch((e: unknown) => e);
    expect(Date.now() - started).toBeGreaterThanOrEqual(110);
    expect(error).toBeInstanceOf(TollgateError);
    expect((error as TollgateError).code).toBe("ChainUnavailable");
    expect((error as TollgateError).retryAfter).toBe(5);
    expect((error as TollgateError).details).toMatchObject({ nonce: row.nonce });
  });

  it("answers a payment whose outcome the look finds at its deadline with the outcome, not a 503", async () => {
    let now = 1_000_000;
    const clock = { now: () => now };
    const waiters = createOutcomeWaiters({ store: counted, clock, pollMs: POLL_MS });
    const row = await pending();
    const answer = waiters.waitForOutcome(row, 5_000);
    await sleep(POLL_MS * 2);
    // A round reads the row still open; then another instance settles it, and the deadline passes
    // before the next round: that round must read the outcome before it times anyone out.
    afterNextLookRead = async () => {
      await settleElsewhere([row]);
      // After the round that read the open row has dealt with it (its answer runs in microtasks).
      setTimeout(() => {
        now += 10_000;
      }, 0);
    };
    await expect(answer).resolves.toMatchObject({
      row: { nonce: row.nonce, status: "settled" },
      batchSize: 1,
    });
  });

  it("keeps waiting through a store that cannot be reached, and answers once it can", async () => {
    const warnings: unknown[] = [];
    const logger = { warn: (...args: unknown[]) => warnings.push(args) } as never;
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: POLL_MS, logger });
    const row = await pending();
    down = true;
    try {
      const answer = waiters.waitForOutcome(row, 30_000);
      await settleElsewhere([row]);
      await sleep(POLL_MS * 4);
      // Several rounds failed; the request still waits, and the failure was logged once.
      expect(statements.filter((s) => s.includes("outcome_batch_size")).length).toBeGreaterThanOrEqual(2);
      expect(warnings).toHaveLength(1);
      down = false;
      await expect(answer).resolves.toMatchObject({
        row: { nonce: row.nonce, status: "settled" },
        batchSize: 1,
      });
    } finally {
      down = false;
    }
  });

  it("answers every waiter 503 at once when the engine stops, and makes no more looks", async () => {
    const waiters = createOutcomeWaiters({ store: counted, clock: systemClock, pollMs: POLL_MS });
    const rows = [await pending(), await pending()];
    const answers = rows.map((row) => waiters.waitForOutcome(row, 30_000).catch((e: unknown) => e));
    await sleep(POLL_MS * 2);
    // "At once": answered within the task that stops the engine, before any timer (a round, a
    // deadline) could run. A task queued right after close() must find every waiter answered.
    const order: string[] = [];
    waiters.close();
    const answered = Promise.all(answers).then((errors) => {
      order.push("answered");
      return errors;
    });
    const nextTask = new Promise<void>((resolve) =>
      setTimeout(() => {
        order.push("next task");
        resolve();
      }, 0),
    );
    const [errors] = await Promise.all([answered, nextTask]);
    expect(order).toEqual(["answered", "next task"]);
    for (const [i, error] of errors.entries()) {
      expect(error).toBeInstanceOf(TollgateError);
      expect((error as TollgateError).code).toBe("ChainUnavailable");
      expect((error as TollgateError).retryAfter).toBe(5);
      expect((error as TollgateError).details).toMatchObject({ nonce: rows[i]?.nonce });
    }
    const late = await waiters.waitForOutcome(await pending(), 30_000).catch((e: unknown) => e);
    expect((late as TollgateError).code).toBe("ChainUnavailable");
    statements = [];
    await sleep(POLL_MS * 3);
    expect(statements).toEqual([]);
  });
});
