import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseUnitsExact as usd } from "../../protocol/amount.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { availableFor } from "./budgetHeadroom.ts";
import { type BudgetLedger, createBudgetLedger } from "./createBudgetLedger.ts";

const A = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B = "0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const T0 = Date.UTC(2026, 0, 1);
const DAY = 86_400_000;

let n = 0;
const fresh = () => `hold-agent-${++n}`;

describe.each<[string, string | undefined]>([
  ["PGlite", undefined],
  ...(process.env.DATABASE_URL ? [["PostgreSQL", process.env.DATABASE_URL] as [string, string]] : []),
])("standing holds on %s", (_name, databaseUrl) => {
  let store: Store;
  const clock = createFixedClock(T0);
  let ledger: BudgetLedger;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl });
    ledger = createBudgetLedger({ store, clock });
  });
  afterAll(async () => {
    await store.close();
  });

  it("counts a hold against the total, daily and per-provider limits, and never lets it expire", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("5"), daily: usd("1"), perProvider: { [A]: usd("0.10") } });
    expect(await ledger.hold(agent, { ref: "s1", provider: A, amount: usd("0.08") })).toBe(usd("0.08"));
    let report = await ledger.report(agent);
    expect(report.reserved).toEqual({ total: usd("0.08"), daily: usd("0.08") });
    expect(availableFor(report, { provider: A, kind: "one-time" })).toBe(usd("0.02"));
    // Eight days later (past any reservation's lifetime) the hold still counts, in the day too.
    clock.set(T0 + 8 * DAY);
    report = await ledger.report(agent);
    expect(report.reserved.daily).toBe(usd("0.08"));
    await expect(ledger.hold(agent, { ref: "s1", provider: A, amount: usd("0.03") })).rejects.toSatisfy(
      (e) => isTollgateError(e, "BudgetExceeded") && e.details?.limit === "perProvider",
    );
    await expect(
      ledger.reserve(agent, { amount: usd("0.03"), provider: A, kind: "one-time" }),
    ).rejects.toSatisfy((e) => isTollgateError(e, "BudgetExceeded"));
    clock.set(T0);
  });

  it("moves charges from the hold to spent; a repeated running total charges nothing twice", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("1") });
    await ledger.hold(agent, { ref: "s2", provider: B, amount: usd("0.30") });
    const first = await ledger.charge(agent, { ref: "s2", kind: "metered", amount: usd("0.05") });
    expect(first).toMatchObject({
      amount: usd("0.05"),
      beyondHold: 0n,
      held: usd("0.25"),
      charged: usd("0.05"),
    });
    // The chain has pulled 0.15 in all under s2: only 0.10 is new; saying it again adds nothing.
    expect((await ledger.charge(agent, { ref: "s2", kind: "subscription", total: usd("0.15") })).amount).toBe(
      usd("0.10"),
    );
    expect((await ledger.charge(agent, { ref: "s2", kind: "subscription", total: usd("0.15") })).amount).toBe(
      0n,
    );
    // A running total below what was charged (estimates ahead of the chain) changes nothing.
    expect((await ledger.charge(agent, { ref: "s2", kind: "subscription", total: usd("0.01") })).amount).toBe(
      0n,
    );
    const report = await ledger.report(agent);
    expect(report.spent.total).toBe(usd("0.15"));
    expect(report.reserved.total).toBe(usd("0.15"));
    expect(report.subscriptions.held).toBe(usd("0.15"));
  });

  it("records a charge beyond the hold (the money moved) and says by how much", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("1") });
    await ledger.hold(agent, { ref: "s3", provider: A, amount: usd("0.10") });
    const outcome = await ledger.charge(agent, { ref: "s3", kind: "subscription", total: usd("0.25") });
    expect(outcome).toMatchObject({ amount: usd("0.25"), beyondHold: usd("0.15"), held: 0n });
    expect((await ledger.report(agent)).spent.total).toBe(usd("0.25"));
  });

  it("releases what is left of a hold when the subscription ends", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("1") });
    await ledger.hold(agent, { ref: "s4", provider: A, amount: usd("0.40") });
    await ledger.charge(agent, { ref: "s4", kind: "subscription", amount: usd("0.10") });
    expect(await ledger.releaseHold(agent, "s4")).toBe(usd("0.30"));
    expect(await ledger.releaseHold(agent, "s4")).toBe(0n);
    const report = await ledger.report(agent);
    expect(report.reserved.total).toBe(0n);
    expect(report.spent.total).toBe(usd("0.10"));
  });

  it("refuses to charge a ref that has no hold", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("1") });
    await expect(ledger.charge(agent, { ref: "nope", kind: "metered", amount: 1n })).rejects.toSatisfy((e) =>
      isTollgateError(e, "NotFound"),
    );
  });

  it("asks the approval hook about a hold above the threshold", async () => {
    const agent = fresh();
    const asked: bigint[] = [];
    const gated = createBudgetLedger({
      store,
      clock,
      approval: {
        threshold: usd("0.5"),
        hook: async (r) => {
          asked.push(r.amount);
          return false;
        },
      },
    });
    await gated.setLimits(agent, { total: usd("10") });
    await expect(gated.hold(agent, { ref: "s5", provider: A, amount: usd("0.6") })).rejects.toSatisfy((e) =>
      isTollgateError(e, "ApprovalDenied"),
    );
    expect(asked).toEqual([usd("0.6")]);
  });

  it("asks once about a subscription's whole commitment: its first period with the hold placed after it", async () => {
    const agent = fresh();
    const asked: { amount: bigint; hold: bigint | undefined; ref: string | undefined }[] = [];
    const gated = createBudgetLedger({
      store,
      clock,
      approval: {
        threshold: usd("0.5"),
        hook: async (r) => {
          asked.push({ amount: r.amount, hold: r.hold, ref: r.ref });
          return true;
        },
      },
    });
    await gated.setLimits(agent, { total: usd("10"), perProvider: { [A]: usd("3") } });
    // A first period of 0.4 (below the threshold alone) and a hold of 0.9: one question about 1.3.
    const first = await gated.reserve(agent, {
      amount: usd("0.4"),
      provider: A,
      kind: "subscription",
      ref: "s6",
      withHold: usd("0.9"),
    });
    await gated.hold(agent, { ref: "s6", provider: A, amount: usd("0.9") });
    await gated.commit(first, usd("0.4"));
    expect(asked).toEqual([{ amount: usd("1.3"), hold: usd("0.9"), ref: "s6" }]);
    // The approval covered that hold once: a later raise under the ref is asked about again.
    await gated.hold(agent, { ref: "s6", provider: A, amount: usd("0.6") });
    expect(asked).toHaveLength(2);
    // Never more than was approved: a hold above `withHold` is asked about on its own.
    await gated.reserve(agent, {
      amount: usd("0.1"),
      provider: A,
      kind: "subscription",
      ref: "s7",
      withHold: usd("0.6"),
    });
    await gated.hold(agent, { ref: "s7", provider: A, amount: usd("0.7") });
    expect(asked.slice(2).map((r) => r.amount)).toEqual([usd("0.7"), usd("0.7")]);
    // The limits still apply to the hold after the question: the per-provider limit of 3 refuses it.
    await gated.reserve(agent, {
      amount: usd("0.1"),
      provider: A,
      kind: "subscription",
      ref: "s8",
      withHold: usd("0.6"),
    });
    await expect(gated.hold(agent, { ref: "s8", provider: A, amount: usd("0.6") })).rejects.toSatisfy((e) =>
      isTollgateError(e, "BudgetExceeded"),
    );
    expect(asked).toHaveLength(5);
  });

  it("refuses a standing hold with a spend that is not a subscription's first period", async () => {
    const agent = fresh();
    await ledger.setLimits(agent, { total: usd("10") });
    await expect(
      ledger.reserve(agent, { amount: usd("0.1"), provider: A, kind: "one-time", withHold: usd("0.5") }),
    ).rejects.toSatisfy((e) => isTollgateError(e, "InvalidRequest"));
  });
});
