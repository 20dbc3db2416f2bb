import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { approvalHook, withSpendGrant } from "../orchestrator/spendApproval.ts";
import { approvalFor, getApprovalThreshold, setApprovalThreshold } from "./approvalThreshold.ts";
import { createBudgetLedger } from "./createBudgetLedger.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;
const SELLER = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const clock = createFixedClock(Date.UTC(2026, 0, 1));

function suite(open: () => Promise<Store>) {
  let store: Store;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store.close();
  });

  it("stores the threshold with the budget, keeps it when limits change, and removes it", async () => {
    const ledger = createBudgetLedger({ store, clock });
    await ledger.setLimits("approver-1", { total: 5_000_000n });
    expect(await getApprovalThreshold(store, "approver-1")).toBeUndefined();
    await setApprovalThreshold(store, "approver-1", 500_000n);
    await ledger.setLimits("approver-1", { total: 6_000_000n });
    expect(await getApprovalThreshold(store, "approver-1")).toBe(500_000n);
    await setApprovalThreshold(store, "approver-1", null);
    expect(await getApprovalThreshold(store, "approver-1")).toBeUndefined();
  });

  it("refuses a threshold for an agent without a budget, and a negative one", async () => {
    await expect(setApprovalThreshold(store, "nobody", 1n)).rejects.toSatisfy((e) =>
      isTollgateError(e, "NotFound"),
    );
    const ledger = createBudgetLedger({ store, clock });
    await ledger.setLimits("approver-2", {});
    await expect(setApprovalThreshold(store, "approver-2", -1n)).rejects.toSatisfy((e) =>
      isTollgateError(e, "InvalidRequest"),
    );
  });

  it("makes the ledger ask above the stored threshold: a grant covers its call only, no hook refuses", async () => {
    await createBudgetLedger({ store, clock }).setLimits("approver-3", { total: 5_000_000n });
    await setApprovalThreshold(store, "approver-3", 100_000n);
    const asked: bigint[] = [];
    const ledger = createBudgetLedger({
      store,
      clock,
      approval: await approvalFor(
        store,
        "approver-3",
        approvalHook(async (request) => {
          asked.push(request.amount);
          return false;
        }),
      ),
    });
    const spend = (amount: bigint) =>
      ledger.reserve("approver-3", { amount, provider: SELLER, kind: "one-time" });
    // At or below the threshold: nobody is asked.
    await spend(100_000n);
    // Above it, outside any approved call: the fallback is asked and says no.
    await expect(spend(200_000n)).rejects.toSatisfy((e) => isTollgateError(e, "ApprovalDenied"));
    expect(asked).toEqual([200_000n]);
    // Inside a call approved up to 0.3: allowed up to that, not beyond.
    await withSpendGrant({ callId: "c1", upTo: 300_000n }, () => spend(300_000n));
    await expect(withSpendGrant({ callId: "c2", upTo: 300_000n }, () => spend(300_001n))).rejects.toSatisfy(
      (e) => isTollgateError(e, "ApprovalDenied"),
    );
    expect(asked).toEqual([200_000n]);

    // Without any hook, a stored threshold refuses what is above it.
    const unattended = createBudgetLedger({
      store,
      clock,
      approval: await approvalFor(store, "approver-3", undefined),
    });
    await expect(
      unattended.reserve("approver-3", { amount: 200_000n, provider: SELLER, kind: "one-time" }),
    ).rejects.toSatisfy((e) => isTollgateError(e, "ApprovalDenied"));
  });
}

describe("approval threshold on PGlite", () => {
  suite(() => createTestStore());
});

describe.runIf(databaseUrl)("approval threshold on PostgreSQL", () => {
  suite(() => createTestStore({ databaseUrl }));
});
