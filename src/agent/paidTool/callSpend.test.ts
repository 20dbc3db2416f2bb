import { describe, expect, it } from "vitest";
import { TollgateError } from "../../protocol/errors.ts";
import type { BudgetLedger, Reservation, ReserveRequest } from "../budget/createBudgetLedger.ts";
import { createCallAllowance, fundedAllowance } from "../callAllowance.ts";
import { CallSpend } from "./callSpend.ts";

/** A ledger that records what the call asks of it (reserve, commit, release), nothing else. */
function recordingLedger(refuseWithin?: string) {
  const log: string[] = [];
  let next = 0;
  const ledger = {
    async reserve(_agent: string, request: ReserveRequest & { within?: string }) {
      if (refuseWithin !== undefined && request.within === refuseWithin) {
        throw new TollgateError("BudgetExceeded", "the sale's part is spent", { details: { limit: "sale" } });
      }
      log.push(`reserve ${request.amount} within ${request.within ?? "-"}`);
      return { id: `r${next++}`, amount: BigInt(request.amount) } as Reservation;
    },
    async commit(r: Reservation, amount: bigint) {
      log.push(`commit ${r.id} ${amount}`);
    },
    async release(r: Reservation) {
      log.push(`release ${r.id}`);
    },
  };
  return { log, ledger: ledger as unknown as BudgetLedger };
}

describe("CallSpend", () => {
  it("commits what was paid across its reservations in order and releases the rest", async () => {
    const { log, ledger } = recordingLedger();
    const spend = new CallSpend(ledger, "agent", "tool", undefined);
    await spend.hold({ amount: 300n, provider: "0x1", kind: "one-time" });
    await spend.hold({ amount: 500n, provider: "0x1", kind: "one-time" });
    await spend.hold({ amount: 200n, provider: "0x1", kind: "one-time" });
    spend.paid = 600n;
    await spend.settleReservations();
    expect(log.slice(3)).toEqual(["commit r0 300", "commit r1 300", "release r2"]);
    expect(spend.reservations).toEqual([]);
  });

  it("does not commit again what a scheme recorded itself, nor a reservation handed to the ledger as pending", async () => {
    const { log, ledger } = recordingLedger();
    const spend = new CallSpend(ledger, "agent", "tool", undefined);
    const first = await spend.hold({ amount: 100n, provider: "0x1", kind: "one-time" }, "memo-1");
    await spend.hold({ amount: 100n, provider: "0x1", kind: "one-time" });
    expect(spend.heldFor("memo-1")).toBe(first);
    spend.untrack(first);
    spend.paid = 150n;
    spend.selfRecorded = 150n;
    await spend.settleReservations();
    expect(log.slice(2)).toEqual(["release r1"]);
  });

  it("settles the sale's allowance once, with what was paid and left pending, less a first period taken across sales", () => {
    const allowance = createCallAllowance(1_000n);
    const spend = new CallSpend(recordingLedger().ledger, "agent", "tool", allowance);
    spend.takeAllowance(400n);
    spend.paid = 500n;
    spend.pending = 100n;
    spend.selfRecorded = 300n;
    spend.ownAcrossSales = true;
    spend.settleAllowance();
    spend.settleAllowance();
    expect(allowance.spent()).toBe(300n);
    expect(allowance.remaining()).toBe(700n);
  });

  it("refuses a hold past the sale's allowance with BudgetExceeded, holding nothing", () => {
    const allowance = createCallAllowance(100n);
    const spend = new CallSpend(recordingLedger().ledger, "agent", "tool", allowance);
    expect(() => spend.takeAllowance(101n)).toThrow(expect.objectContaining({ code: "BudgetExceeded" }));
    expect(allowance.remaining()).toBe(100n);
  });

  it("reserves a sale's purchase within its supplier's part, and within the sale's slack once that part is spent", async () => {
    const funded = () =>
      fundedAllowance(createCallAllowance(1_000n), { id: "sale-1", bySupplier: { "0xab": "part-1" } });
    const { log, ledger } = recordingLedger();
    await new CallSpend(ledger, "agent", "tool", funded()).reserve({
      amount: 10n,
      provider: "0xAB",
      kind: "one-time",
    });
    const refusing = recordingLedger("part-1");
    await new CallSpend(refusing.ledger, "agent", "tool", funded()).reserve({
      amount: 10n,
      provider: "0xAB",
      kind: "one-time",
    });
    expect(log).toEqual(["reserve 10 within part-1"]);
    expect(refusing.log).toEqual(["reserve 10 within sale-1"]);
  });
});
