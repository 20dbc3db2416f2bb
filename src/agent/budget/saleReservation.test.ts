/**
 * Sale reservations: a reseller reserves a sale's supplier spend before its buyer pays, and each
 * purchase draws from it (`within`), so what the sale admitted can always be spent on it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { type BudgetLedger, createBudgetLedger } from "./createBudgetLedger.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;
const SALE = "0x0000000000000000000000000000000000000000";
const A = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const T0 = Date.UTC(2026, 0, 1);
let agents = 0;

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (isTollgateError(error)) return error.code;
    throw error;
  }
  return "ok";
}

function saleSuite(open: () => Promise<Store>) {
  let store: Store;
  const clock = createFixedClock(T0);
  let ledger: BudgetLedger;
  beforeAll(async () => {
    store = await open();
    ledger = createBudgetLedger({ store, clock });
  });
  afterAll(async () => {
    await store.close();
  });

  it("a purchase drawn from an admitted sale fits even when the rest of the budget is taken", async () => {
    const agent = `sale-agent-${++agents}`;
    await ledger.setLimits(agent, { total: 100n });
    const sale = await ledger.reserve(agent, {
      amount: 80n,
      provider: SALE,
      kind: "one-time",
      ref: "sale:1",
    });
    // Another spend takes the rest: outside the sale nothing fits any more.
    await ledger.reserve(agent, { amount: 20n, provider: A, kind: "one-time" });
    expect(await code(ledger.reserve(agent, { amount: 1n, provider: A, kind: "one-time" }))).toBe(
      "BudgetExceeded",
    );
    const first = await ledger.reserve(agent, {
      amount: 50n,
      provider: A,
      kind: "one-time",
      within: sale.id,
    });
    // The sale holds 30 now: 40 is refused (limit "sale"), 30 is not.
    expect(await ledger.saleHeld(agent, sale.id)).toBe(30n);
    expect(
      await code(ledger.reserve(agent, { amount: 40n, provider: A, kind: "one-time", within: sale.id })),
    ).toBe("BudgetExceeded");
    const report = await ledger.report(agent);
    expect(report.reserved.total).toBe(100n);
    // Committed for less: the rest goes back to the sale, and a retry can draw it.
    await ledger.commit(first, 20n);
    const retry = await ledger.reserve(agent, {
      amount: 60n,
      provider: A,
      kind: "one-time",
      within: sale.id,
    });
    await ledger.release(retry);
    expect(await ledger.saleHeld(agent, sale.id)).toBe(60n);
    // Only the agent's own open sale: another agent, a drawn purchase or a closed sale hold nothing.
    expect(await ledger.saleHeld("someone-else", sale.id)).toBe(0n);
    expect(await ledger.saleHeld(agent, retry.id)).toBe(0n);
    await ledger.release(sale);
    expect(await ledger.saleHeld(agent, sale.id)).toBe(0n);
    const after = await ledger.report(agent);
    expect(after.spent.total).toBe(20n);
    // Closed: what the sale did not use is free again, and nothing draws from it any more.
    expect(after.reserved.total).toBe(20n);
    expect(
      await code(ledger.reserve(agent, { amount: 1n, provider: A, kind: "one-time", within: sale.id })),
    ).toBe("BudgetExceeded");
  });

  it("a draw still meets the per-provider and per-call limits, and never draws another agent's sale", async () => {
    const agent = `sale-agent-${++agents}`;
    const other = `sale-agent-${++agents}`;
    await ledger.setLimits(agent, { total: 100n, perCall: 30n, perProvider: { [A]: 10n } });
    await ledger.setLimits(other, { total: 100n });
    const sale = await ledger.reserve(agent, {
      amount: 30n,
      provider: SALE,
      kind: "one-time",
      ref: "sale:2",
    });
    expect(
      await code(ledger.reserve(agent, { amount: 20n, provider: A, kind: "one-time", within: sale.id })),
    ).toBe("BudgetExceeded");
    expect(
      await code(ledger.reserve(other, { amount: 5n, provider: A, kind: "one-time", within: sale.id })),
    ).toBe("BudgetExceeded");
    // The refused draws left the sale whole.
    const fits = await ledger.reserve(agent, { amount: 10n, provider: A, kind: "one-time", within: sale.id });
    await ledger.commit(fits);
    await ledger.release(sale);
    const report = await ledger.report(agent);
    expect([report.spent.total, report.reserved.total]).toEqual([10n, 0n]);
  });

  it("an expired sale frees its budget by itself and cannot be drawn from", async () => {
    const agent = `sale-agent-${++agents}`;
    await ledger.setLimits(agent, { total: 100n });
    const sale = await ledger.reserve(agent, {
      amount: 100n,
      provider: SALE,
      kind: "one-time",
      ref: "sale:3",
      ttlSeconds: 60,
    });
    clock.advance(61_000);
    expect(
      await code(ledger.reserve(agent, { amount: 1n, provider: A, kind: "one-time", within: sale.id })),
    ).toBe("BudgetExceeded");
    expect((await ledger.report(agent)).reserved.total).toBe(0n);
  });
}

describe("sale reservations (PGlite)", () => {
  saleSuite(() => createTestStore());
});
describe.skipIf(databaseUrl === undefined)("sale reservations (PostgreSQL)", () => {
  saleSuite(() => createTestStore({ databaseUrl }));
});
