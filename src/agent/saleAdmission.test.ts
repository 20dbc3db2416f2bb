/**
 * Sale admission over a real budget ledger: a sale is reserved or refused with `SaleNotAdmitted`
 * (nothing held), and a 402's reservation is kept by memo until its buyer pays or it lapses.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../protocol/clock.ts";
import { isTollgateError } from "../protocol/errors.ts";
import { createTestStore } from "../store/createTestStore.ts";
import type { Store } from "../store/store.ts";
import { type BudgetLedger, createBudgetLedger } from "./budget/createBudgetLedger.ts";
import { createBudgetAdmission, createOfferBook, fundedSale, saleFundingOf } from "./saleAdmission.ts";

const clock = createFixedClock(Date.UTC(2026, 0, 1));
let store: Store;
let budget: BudgetLedger;

beforeAll(async () => {
  store = await createTestStore();
  budget = createBudgetLedger({ store, clock });
});
afterAll(async () => {
  await store.close();
});

async function refusal(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (isTollgateError(error)) return error.code;
    throw error;
  }
  return "admitted";
}

describe("sale admission", () => {
  it("reserves each sale's price until closed and refuses one that does not fit, holding nothing", async () => {
    await budget.setLimits("admit-a", { total: 100n });
    const admission = createBudgetAdmission({ budget, agent: "admit-a", amount: 40n });
    const one = await admission.admit();
    const two = await admission.admit();
    expect(await refusal(admission.admit())).toBe("SaleNotAdmitted");
    expect((await budget.report("admit-a")).reserved.total).toBe(80n);
    await one.close();
    await one.close(); // idempotent
    const three = await admission.admit();
    await Promise.all([two.close(), three.close()]);
    expect((await budget.report("admit-a")).reserved.total).toBe(0n);
  });

  it("keeps `keepFree` of the budget beside admitted sales, and releases a sale it refuses for it", async () => {
    await budget.setLimits("admit-b", { total: 100n });
    const admission = createBudgetAdmission({ budget, agent: "admit-b", amount: 40n, keepFree: 30n });
    const one = await admission.admit();
    expect(await refusal(admission.admit())).toBe("SaleNotAdmitted");
    expect((await budget.report("admit-b")).reserved.total).toBe(40n);
    await one.close();
  });

  it("reserves each supplier's part under it: its per-provider and per-call limits refuse the sale, holding nothing", async () => {
    const S = "0x5555555555555555555555555555555555555555";
    const T = "0x6666666666666666666666666666666666666666";
    await budget.setLimits("admit-d", { total: 1_000n, perCall: 25n, perProvider: { [S]: 50n } });
    const purchases = [
      { provider: S, amount: 20n },
      { provider: T, amount: 10n },
    ] as const;
    const admission = createBudgetAdmission({
      budget,
      agent: "admit-d",
      amount: 40n,
      purchases: [...purchases],
    });
    const one = await admission.admit();
    const two = await admission.admit();
    // The total has room; S's limit has 10 left, less than a sale pays it.
    expect(await refusal(admission.admit())).toBe("SaleNotAdmitted");
    const report = await budget.report("admit-d");
    expect(report.reserved.total).toBe(80n);
    expect(report.perProvider.find((p) => p.provider.toLowerCase() === S)?.reserved).toBe(40n);
    // Purchases find their supplier's part; the slack is the sale's own reservation.
    const funding = saleFundingOf(fundedSale({ key: "payment:0x2", earned: 40n }, one));
    expect(funding?.bySupplier?.[S]).toBeDefined();
    expect(await budget.saleHeld("admit-d", funding!.bySupplier![S]!)).toBe(20n);
    expect(await budget.saleHeld("admit-d", funding!.id)).toBe(10n);
    await Promise.all([one.close(), two.close()]);
    expect((await budget.report("admit-d")).reserved.total).toBe(0n);
    // A part above the per-call limit can never be paid in one call: refused at admission.
    const dear = createBudgetAdmission({
      budget,
      agent: "admit-d",
      amount: 40n,
      purchases: [{ provider: T, amount: 30n }],
    });
    expect(await refusal(dear.admit())).toBe("SaleNotAdmitted");
    expect((await budget.report("admit-d")).reserved.total).toBe(0n);
    // Parts beyond what a sale earns, or two for one supplier, are a mistake of the reseller's.
    expect(() =>
      createBudgetAdmission({ budget, agent: "admit-d", amount: 10n, purchases: [...purchases] }),
    ).toThrow(/at most what the sale earns/);
  });

  it("pays a subscribed supply from its hold while the hold has room for the sale, else reserves its part under the supplier", async () => {
    const S = "0x7777777777777777777777777777777777777777";
    await budget.setLimits("admit-sub", { total: 1_000n, perProvider: { [S]: 50n } });
    // The reseller's subscription to S's plan holds 30 (counted against S's limit since subscribing).
    await budget.hold("admit-sub", { ref: "subscription:admit-sub", provider: S, amount: 30n });
    let heldBy: string | undefined;
    const admission = createBudgetAdmission({
      budget,
      agent: "admit-sub",
      amount: 40n,
      purchases: [{ provider: S, amount: 20n, heldBy: async () => heldBy }],
    });
    const bySupplierOf = (ticket: Awaited<ReturnType<typeof admission.admit>>) =>
      saleFundingOf(fundedSale({ key: "payment:0x3", earned: 40n }, ticket))?.bySupplier?.[S];
    // Not subscribed (yet): the overage of a call is reserved under S, beside the hold: 30 + 20 fits 50.
    const first = await admission.admit();
    expect(bySupplierOf(first)).toBeDefined();
    expect(await refusal(admission.admit())).toBe("SaleNotAdmitted");
    await first.close();
    // Subscribed: one sale is paid from the hold's room (its part 0, nothing more under S); the next
    // finds 10 of the hold's room left and reserves its part; a third has no room under S's limit.
    heldBy = "subscription:admit-sub";
    const fromHold = await admission.admit();
    expect(bySupplierOf(fromHold)).toBeUndefined();
    const provider = async () =>
      (await budget.report("admit-sub")).perProvider.find((p) => p.provider.toLowerCase() === S)?.reserved;
    expect(await provider()).toBe(30n);
    const withPart = await admission.admit();
    expect(bySupplierOf(withPart)).toBeDefined();
    expect(await provider()).toBe(50n);
    expect(await refusal(admission.admit())).toBe("SaleNotAdmitted");
    // Each sale still reserves all it may cost: the hold's part joins its slack.
    expect((await budget.report("admit-sub")).reserved.total).toBe(30n + 40n + 40n);
    await fromHold.close();
    const again = await admission.admit();
    expect(bySupplierOf(again)).toBeUndefined();
    await Promise.all([withPart.close(), again.close()]);
    expect(await provider()).toBe(30n);
  });

  it("hands a 402's reservation to the one paid request naming any of its memos, and frees it when it lapses", async () => {
    await budget.setLimits("admit-c", { total: 100n });
    const admission = createBudgetAdmission({ budget, agent: "admit-c", amount: 60n });
    const offers = createOfferBook(clock, 120_000);
    const ticket = await admission.admit();
    offers.keep(["memo-once", "memo-sub"], ticket);
    expect(offers.size()).toBe(1);
    expect(offers.take("memo-sub")).toBe(ticket);
    // Taken once: neither memo finds it again.
    expect(offers.take("memo-once")).toBeUndefined();
    expect(saleFundingOf(fundedSale({ key: "payment:0x1", earned: 60n }, ticket))).toEqual({
      id: ticket.reservation.id,
    });
    await ticket.close();

    const lapsing = await admission.admit();
    offers.keep(["memo-late"], lapsing);
    clock.advance(120_001);
    expect(offers.take("memo-late")).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await budget.report("admit-c")).reserved.total).toBe(0n);
  });
});
