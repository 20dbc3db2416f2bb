import fc from "fast-check";
import { getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseUnitsExact as usd } from "../../protocol/amount.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import { type ErrorCode, isTollgateError, type TollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { availableFor } from "./budgetHeadroom.ts";
import type { SpendKind } from "./budgetLimits.ts";
import {
  type ApprovalRequest,
  type BudgetLedger,
  createBudgetLedger,
  type Reservation,
} from "./createBudgetLedger.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;

const A = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B = "0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C = "0xcccccccccccccccccccccccccccccccccccccccc";
const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 0, 1);

async function failure(promise: Promise<unknown>, code: ErrorCode): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (isTollgateError(error, code)) return error;
    throw error;
  }
  throw new Error(`expected ${code}, but the call succeeded`);
}

let agentCounter = 0;
const freshAgent = () => `agent-${++agentCounter}`;

function ledgerSuite(open: () => Promise<Store>) {
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

  describe("payments whose outcome is unknown", () => {
    const NONCE = `0x${"ab".repeat(32)}` as const;
    it("keeps a pending payment's hold past its reservation's expiry, and forgets it once committed", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { total: usd("1") });
      const r = await ledger.reserve(agent, {
        amount: usd("0.4"),
        provider: A,
        kind: "one-time",
        ttlSeconds: 60,
      });
      await ledger.pend(r, { payer: B, nonce: NONCE, validBefore: Math.floor(T0 / 1000) + 300 });
      await ledger.pend(r, { payer: B, nonce: NONCE, validBefore: Math.floor(T0 / 1000) + 300 });
      expect(await ledger.pendingPayments(agent)).toMatchObject([
        { spendId: r.id, payer: getAddress(B), nonce: NONCE, amount: usd("0.4") },
      ]);
      clock.advance(2 * HOUR);
      // Past the reservation's own 60 s, the hold still counts: the payment may settle.
      expect((await ledger.report(agent)).reserved.total).toBe(usd("0.4"));
      await failure(
        ledger.reserve(agent, { amount: usd("0.7"), provider: A, kind: "one-time" }),
        "BudgetExceeded",
      );
      await ledger.commit(r);
      expect(await ledger.pendingPayments(agent)).toEqual([]);
      expect((await ledger.report(agent)).spent.total).toBe(usd("0.4"));
    });

    it("forgets a pending payment once released, and refuses a bad nonce", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { total: usd("1") });
      const r = await ledger.reserve(agent, { amount: usd("0.4"), provider: A, kind: "one-time" });
      await failure(
        ledger.pend(r, { payer: B, nonce: "0x12" as `0x${string}`, validBefore: 1 }),
        "InvalidRequest",
      );
      await ledger.pend(r, { payer: B, nonce: NONCE, validBefore: 1 });
      await ledger.release(r);
      expect(await ledger.pendingPayments(agent)).toEqual([]);
      expect((await ledger.report(agent)).reserved.total).toBe(0n);
    });
  });

  describe("limits", () => {
    it("stores limits and reads them back with providers checksummed", async () => {
      const agent = freshAgent();
      expect(await ledger.getLimits(agent)).toBeUndefined();
      await ledger.setLimits(agent, { total: usd("10"), daily: usd("2"), perProvider: { [A]: usd("1") } });
      expect(await ledger.getLimits(agent)).toEqual({
        total: usd("10"),
        daily: usd("2"),
        perProvider: { [getAddress(A)]: usd("1") },
      });
      await ledger.setLimits(agent, { perCall: usd("0.05") });
      expect(await ledger.getLimits(agent)).toEqual({ perCall: usd("0.05") });
    });

    it("refuses bad agent names, negative limits and one provider written twice", async () => {
      await failure(ledger.setLimits("has space", {}), "InvalidRequest");
      await failure(ledger.setLimits(freshAgent(), { total: -1n }), "InvalidRequest");
      await failure(
        ledger.setLimits(freshAgent(), {
          perProvider: { [A]: 1n, [A.toUpperCase().replace("0X", "0x")]: 2n },
        }),
        "InvalidRequest",
      );
    });

    it("refuses any spend by an agent without a budget", async () => {
      const error = await failure(
        ledger.reserve(freshAgent(), { amount: 1n, provider: A, kind: "one-time" }),
        "BudgetExceeded",
      );
      expect(error.details?.limit).toBe("budget");
    });
  });

  describe("each limit holds", () => {
    it("total: refuses the spend that would pass the total, naming the limit", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { total: usd("1") });
      const first = await ledger.reserve(agent, { amount: usd("0.6"), provider: A, kind: "one-time" });
      await ledger.commit(first);
      await ledger.reserve(agent, { amount: usd("0.3"), provider: B, kind: "metered" });
      const error = await failure(
        ledger.reserve(agent, { amount: usd("0.2"), provider: C, kind: "one-time" }),
        "BudgetExceeded",
      );
      expect(error.details).toMatchObject({
        limit: "total",
        limitAmount: "1000000",
        used: "900000",
        requested: "200000",
      });
      expect(error.message).toContain("total limit of 1 USDC");
      await ledger.reserve(agent, { amount: usd("0.1"), provider: C, kind: "one-time" });
    });

    it("perCall: refuses a single one-time or metered spend above it, not a subscription period", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { perCall: usd("0.05") });
      await ledger.reserve(agent, { amount: usd("0.05"), provider: A, kind: "one-time" });
      const error = await failure(
        ledger.reserve(agent, { amount: usd("0.050001"), provider: A, kind: "one-time" }),
        "BudgetExceeded",
      );
      expect(error.details?.limit).toBe("perCall");
      await failure(
        ledger.reserve(agent, { amount: usd("0.06"), provider: A, kind: "metered" }),
        "BudgetExceeded",
      );
      await ledger.reserve(agent, { amount: usd("9"), provider: A, kind: "subscription", ref: "plan:3" });
    });

    it("perProvider: caps one provider and leaves the others alone", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { perProvider: { [A]: usd("1") } });
      await ledger.commit(await ledger.reserve(agent, { amount: usd("0.7"), provider: A, kind: "one-time" }));
      const error = await failure(
        ledger.reserve(agent, {
          amount: usd("0.4"),
          provider: A.toUpperCase().replace("0X", "0x"),
          kind: "one-time",
        }),
        "BudgetExceeded",
      );
      expect(error.details).toMatchObject({ limit: "perProvider", used: "700000" });
      await ledger.reserve(agent, { amount: usd("0.3"), provider: A, kind: "one-time" });
      await ledger.reserve(agent, { amount: usd("5"), provider: B, kind: "one-time" });
    });

    it("daily: counts spends of the last 24 hours only (a rolling window on the injected clock)", async () => {
      const agent = freshAgent();
      clock.set(T0);
      await ledger.setLimits(agent, { daily: usd("2") });
      await ledger.commit(await ledger.reserve(agent, { amount: usd("1.5"), provider: A, kind: "one-time" }));
      clock.set(T0 + 12 * HOUR);
      await ledger.commit(await ledger.reserve(agent, { amount: usd("0.5"), provider: A, kind: "one-time" }));
      clock.set(T0 + 24 * HOUR - 1);
      const error = await failure(
        ledger.reserve(agent, { amount: usd("0.1"), provider: A, kind: "one-time" }),
        "BudgetExceeded",
      );
      expect(error.details).toMatchObject({ limit: "daily", used: "2000000" });
      // Exactly 24 h after the first spend it has left the window; the second has not.
      clock.set(T0 + 24 * HOUR);
      expect((await ledger.report(agent)).spent).toEqual({ total: usd("2"), daily: usd("0.5") });
      await ledger.reserve(agent, { amount: usd("1.5"), provider: A, kind: "one-time" });
      await failure(ledger.reserve(agent, { amount: 1n, provider: A, kind: "one-time" }), "BudgetExceeded");
      clock.set(T0 + 36 * HOUR);
      await ledger.reserve(agent, { amount: usd("0.5"), provider: A, kind: "one-time" });
      clock.set(T0);
    });

    it("maxSubscriptionCommitment: bounds active subscriptions; a renewal replaces, an ended one frees", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { maxSubscriptionCommitment: usd("20") });
      await ledger.commit(
        await ledger.reserve(agent, { amount: usd("9"), provider: A, kind: "subscription", ref: "sub:1" }),
      );
      await ledger.commit(
        await ledger.reserve(agent, { amount: usd("9"), provider: B, kind: "subscription", ref: "sub:2" }),
      );
      const error = await failure(
        ledger.reserve(agent, { amount: usd("9"), provider: C, kind: "subscription", ref: "sub:3" }),
        "BudgetExceeded",
      );
      expect(error.details).toMatchObject({ limit: "maxSubscriptionCommitment", used: "18000000" });
      // Renewing sub:1 keeps one commitment for it, at the new period's price.
      await ledger.commit(
        await ledger.reserve(agent, { amount: usd("11"), provider: A, kind: "subscription", ref: "sub:1" }),
      );
      expect((await ledger.report(agent)).subscriptions.committed).toBe(usd("20"));
      expect(await ledger.endSubscription(agent, "sub:2")).toBe(true);
      expect(await ledger.endSubscription(agent, "sub:2")).toBe(false);
      await ledger.reserve(agent, { amount: usd("9"), provider: C, kind: "subscription", ref: "sub:3" });
      // One-time spends do not count as commitments.
      await ledger.reserve(agent, { amount: usd("50"), provider: C, kind: "one-time" });
      const report = await ledger.report(agent);
      expect(report.subscriptions).toMatchObject({ committed: usd("11"), reserved: usd("9") });
      expect(report.remaining.maxSubscriptionCommitment).toBe(0n);
    });

    it("asks subscription spends for a ref", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, {});
      await failure(
        ledger.reserve(agent, { amount: 1n, provider: A, kind: "subscription" }),
        "InvalidRequest",
      );
    });
  });

  describe("commit and release", () => {
    it("commits less than reserved and frees the difference", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { total: usd("1") });
      const hold = await ledger.reserve(agent, { amount: usd("1"), provider: A, kind: "metered" });
      const outcome = await ledger.commit(hold, usd("0.4"));
      expect(outcome).toEqual({
        id: hold.id,
        status: "committed",
        reserved: usd("1"),
        committed: usd("0.4"),
        late: false,
      });
      const report = await ledger.report(agent);
      expect(report.spent.total).toBe(usd("0.4"));
      expect(report.reserved.total).toBe(0n);
      expect(report.remaining.total).toBe(usd("0.6"));
    });

    it("refuses to commit more than was reserved", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, {});
      const hold = await ledger.reserve(agent, { amount: 100n, provider: A, kind: "one-time" });
      const error = await failure(ledger.commit(hold, 101n), "BudgetExceeded");
      expect(error.details?.limit).toBe("reservation");
      expect((await ledger.report(agent)).reserved.total).toBe(100n);
    });

    it("is idempotent: a second commit returns the first outcome, release after commit changes nothing", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, {});
      const hold = await ledger.reserve(agent, { amount: 100n, provider: A, kind: "one-time" });
      const first = await ledger.commit(hold, 80n);
      expect(await ledger.commit(hold)).toEqual(first);
      expect(await ledger.commit({ id: hold.id }, 80n)).toEqual(first);
      await failure(ledger.commit(hold, 90n), "InvalidRequest");
      expect(await ledger.release(hold)).toEqual(first);
      expect((await ledger.report(agent)).spent.total).toBe(80n);
    });

    it("releases once; releasing again is a no-op and committing a released hold throws", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, { total: 100n });
      const hold = await ledger.reserve(agent, { amount: 100n, provider: A, kind: "one-time" });
      const released = await ledger.release(hold);
      expect(released).toEqual({
        id: hold.id,
        status: "released",
        reserved: 100n,
        committed: 0n,
        late: false,
      });
      expect(await ledger.release(hold)).toEqual(released);
      await failure(ledger.commit(hold), "InvalidRequest");
      await ledger.reserve(agent, { amount: 100n, provider: A, kind: "one-time" });
    });

    it("reports an unknown reservation as NotFound", async () => {
      await failure(ledger.commit({ id: "no-such-id" }), "NotFound");
      await failure(ledger.release({ id: "no-such-id" }), "NotFound");
    });
  });

  describe("expiry", () => {
    it("stops counting a stale reservation once it expires, and records a late commit", async () => {
      const agent = freshAgent();
      clock.set(T0);
      await ledger.setLimits(agent, { total: usd("1") });
      const stale = await ledger.reserve(agent, {
        amount: usd("1"),
        provider: A,
        kind: "one-time",
        ttlSeconds: 60,
      });
      expect(stale.expiresAt.getTime()).toBe(T0 + 60_000);
      clock.set(T0 + 59_999);
      await failure(ledger.reserve(agent, { amount: 1n, provider: A, kind: "one-time" }), "BudgetExceeded");
      clock.set(T0 + 60_000);
      expect((await ledger.report(agent)).reserved.total).toBe(0n);
      const fresh = await ledger.reserve(agent, { amount: usd("0.5"), provider: A, kind: "one-time" });
      expect((await ledger.commit(fresh)).late).toBe(false);
      const late = await ledger.commit(stale, usd("0.2"));
      expect(late).toMatchObject({ status: "committed", committed: usd("0.2"), late: true });
      expect((await ledger.report(agent)).spent.total).toBe(usd("0.7"));
      clock.set(T0);
    });

    it("uses the ledger's default lifetime when the request names none", async () => {
      const agent = freshAgent();
      clock.set(T0);
      const short = createBudgetLedger({ store, clock, reservationTtlSeconds: 30 });
      await short.setLimits(agent, { total: 10n });
      const hold = await short.reserve(agent, { amount: 10n, provider: A, kind: "one-time" });
      expect(hold.expiresAt.getTime() - hold.reservedAt.getTime()).toBe(30_000);
      clock.set(T0 + 30_000);
      await short.reserve(agent, { amount: 10n, provider: A, kind: "one-time" });
      clock.set(T0);
    });
  });

  describe("approval hook", () => {
    it("asks about spends above the threshold only, and a no stops the spend", async () => {
      const agent = freshAgent();
      const asked: ApprovalRequest[] = [];
      let answer = false;
      const gated = createBudgetLedger({
        store,
        clock,
        approval: {
          threshold: usd("1"),
          hook: async (request) => {
            asked.push(request);
            return answer;
          },
        },
      });
      await gated.setLimits(agent, { total: usd("10") });
      await gated.reserve(agent, { amount: usd("1"), provider: A, kind: "one-time" });
      expect(asked).toEqual([]);
      const error = await failure(
        gated.reserve(agent, { amount: usd("1.5"), provider: A, kind: "one-time", ref: "memo-1" }),
        "ApprovalDenied",
      );
      expect(error.details).toMatchObject({ requested: "1500000", threshold: "1000000" });
      expect(asked).toEqual([
        {
          agent,
          amount: usd("1.5"),
          provider: "0xaAaAaAaaAaAaAaaAaAAAAAAAAaaaAaAaAaaAaaAa",
          kind: "one-time",
          ref: "memo-1",
        },
      ]);
      expect((await gated.report(agent)).reserved.total).toBe(usd("1"));
      answer = true;
      await gated.reserve(agent, { amount: usd("1.5"), provider: A, kind: "one-time" });
      expect((await gated.report(agent)).reserved.total).toBe(usd("2.5"));
    });

    it("does not ask about a spend the limits refuse, and treats a failing hook as a denial", async () => {
      const agent = freshAgent();
      let calls = 0;
      const gated = createBudgetLedger({
        store,
        clock,
        approval: {
          threshold: 0n,
          hook: async () => {
            calls += 1;
            throw new Error("approver unreachable");
          },
        },
      });
      await gated.setLimits(agent, { total: 5n });
      await failure(gated.reserve(agent, { amount: 6n, provider: A, kind: "one-time" }), "BudgetExceeded");
      expect(calls).toBe(0);
      const error = await failure(
        gated.reserve(agent, { amount: 5n, provider: A, kind: "one-time" }),
        "ApprovalDenied",
      );
      expect(error.cause).toBeInstanceOf(Error);
      expect(calls).toBe(1);
      expect((await gated.report(agent)).reserved.total).toBe(0n);
    });
  });

  describe("report", () => {
    it("breaks spend down per provider and per kind with the remaining room of each limit", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, {
        total: usd("10"),
        daily: usd("3"),
        perCall: usd("1"),
        perProvider: { [B]: usd("2") },
        maxSubscriptionCommitment: usd("5"),
      });
      await ledger.commit(await ledger.reserve(agent, { amount: usd("0.5"), provider: A, kind: "one-time" }));
      await ledger.commit(
        await ledger.reserve(agent, { amount: usd("1"), provider: B, kind: "subscription", ref: "s" }),
      );
      await ledger.reserve(agent, { amount: usd("0.25"), provider: B, kind: "metered" });
      const report = await ledger.report(agent);
      expect(report.spent).toEqual({ total: usd("1.5"), daily: usd("1.5") });
      expect(report.reserved).toEqual({ total: usd("0.25"), daily: usd("0.25") });
      expect(report.remaining).toEqual({
        total: usd("8.25"),
        daily: usd("1.25"),
        perCall: usd("1"),
        maxSubscriptionCommitment: usd("4"),
      });
      expect(report.perProvider).toEqual([
        {
          provider: "0xaAaAaAaaAaAaAaaAaAAAAAAAAaaaAaAaAaaAaaAa",
          spent: usd("0.5"),
          reserved: 0n,
          limit: undefined,
          remaining: undefined,
        },
        {
          provider: "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB",
          spent: usd("1"),
          reserved: usd("0.25"),
          limit: usd("2"),
          remaining: usd("0.75"),
        },
      ]);
      expect(report.perKind).toEqual({
        "one-time": { spent: usd("0.5"), reserved: 0n },
        subscription: { spent: usd("1"), reserved: 0n },
        metered: { spent: 0n, reserved: usd("0.25") },
      });
      expect(availableFor(report, { provider: B, kind: "one-time" })).toBe(usd("0.75"));
      expect(availableFor(report, { provider: A, kind: "subscription", ref: "t" })).toBe(usd("1.25"));
    });

    it("throws NotFound for an agent without a budget", async () => {
      await failure(ledger.report(freshAgent()), "NotFound");
    });
  });

  describe("concurrency", () => {
    const cases = [
      { limit: "total", limits: { total: 1000n }, kind: "one-time" },
      { limit: "daily", limits: { daily: 1000n }, kind: "metered" },
      { limit: "perProvider", limits: { perProvider: { [A]: 1000n } }, kind: "one-time" },
      {
        limit: "maxSubscriptionCommitment",
        limits: { maxSubscriptionCommitment: 1000n },
        kind: "subscription",
      },
    ] as const;
    for (const { limit, limits, kind } of cases) {
      it(`${limit}: of 50 equal reservations made at once, exactly as many as fit succeed`, async () => {
        const agent = freshAgent();
        await ledger.setLimits(agent, limits);
        const outcomes = await Promise.allSettled(
          Array.from({ length: 50 }, (_, i) =>
            ledger.reserve(agent, { amount: 100n, provider: A, kind, ref: `s${i}` }),
          ),
        );
        const refused = outcomes.filter((o) => o.status === "rejected");
        expect(refused.every((o) => isTollgateError(o.reason, "BudgetExceeded"))).toBe(true);
        expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(10);
        expect(refused.map((o) => (o.reason as TollgateError).details?.limit)).toEqual(Array(40).fill(limit));
      });
    }
  });

  describe("properties", () => {
    const kinds: SpendKind[] = ["one-time", "metered", "subscription"];
    const spendArb = fc.record({
      amount: fc.bigInt({ min: 1n, max: 400n }),
      provider: fc.constantFrom(A, B, C),
      kind: fc.constantFrom(...kinds),
      ref: fc.constantFrom("s1", "s2", "s3", "s4"),
      /** What happens after the hold: commit all, commit part, or release. */
      /** Settle right after reserving (racing other reservations) or after all have reserved. */
      early: fc.boolean(),
      settle: fc.oneof(
        fc.constant("all" as const),
        fc.constant("release" as const),
        fc.bigInt({ min: 0n, max: 400n }),
      ),
    });

    it("with 50 reservations at once, committed spend never exceeds any limit", async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(spendArb, { minLength: 50, maxLength: 50 }), async (spends) => {
          const agent = freshAgent();
          const limits = {
            total: 3000n,
            daily: 2500n,
            perCall: 300n,
            perProvider: { [A]: 1000n },
            maxSubscriptionCommitment: 700n,
          };
          await ledger.setLimits(agent, limits);
          const settleHold = async (hold: Reservation, settle: (typeof spends)[number]["settle"]) => {
            if (settle === "release") return (await ledger.release(hold)).committed;
            const actual = settle === "all" || settle > hold.amount ? hold.amount : settle;
            return (await ledger.commit(hold, actual)).committed;
          };
          // Phase 1: every reservation at once; half of them settle as soon as they hold, so commits
          // and releases race the remaining reservations too.
          const held = await Promise.all(
            spends.map(async ({ settle, early, ...spend }) => {
              let hold: Reservation;
              try {
                hold = await ledger.reserve(agent, spend);
              } catch (error) {
                if (isTollgateError(error, "BudgetExceeded")) return "refused" as const;
                throw error;
              }
              if (spend.kind !== "subscription") expect(hold.amount).toBeLessThanOrEqual(limits.perCall);
              if (early) return { open: false as const, committed: await settleHold(hold, settle) };
              return { open: true as const, hold, settle };
            }),
          );
          const during = await ledger.report(agent);
          expect(during.spent.total + during.reserved.total).toBeLessThanOrEqual(limits.total);
          expect(during.spent.daily + during.reserved.daily).toBeLessThanOrEqual(limits.daily);
          const duringA = during.perProvider.find((p) => p.provider.toLowerCase() === A);
          expect((duringA?.spent ?? 0n) + (duringA?.reserved ?? 0n)).toBeLessThanOrEqual(
            limits.perProvider[A],
          );
          // Phase 2: settle the holds still open, all at once.
          const results = await Promise.all(
            held.map(async (h) => {
              if (h === "refused") return 0n;
              return h.open ? settleHold(h.hold, h.settle) : h.committed;
            }),
          );
          const report = await ledger.report(agent);
          const committed = results.reduce((a, b) => a + b, 0n);
          expect(report.spent.total).toBe(committed);
          expect(report.reserved.total).toBe(0n);
          expect(committed).toBeLessThanOrEqual(limits.total);
          expect(report.spent.daily).toBeLessThanOrEqual(limits.daily);
          const providerA = report.perProvider.find((p) => p.provider.toLowerCase() === A);
          expect(providerA?.spent ?? 0n).toBeLessThanOrEqual(limits.perProvider[A]);
          expect(report.subscriptions.committed).toBeLessThanOrEqual(limits.maxSubscriptionCommitment);
          // The demand is well above the limits, so they must have bitten.
          expect(held).toContain("refused");
        }),
        { numRuns: 6 },
      );
    }, 120_000);

    it("a reservation succeeds exactly when its amount fits availableFor() of the report just before", async () => {
      const agent = freshAgent();
      await ledger.setLimits(agent, {
        total: 5000n,
        daily: 4000n,
        perCall: 250n,
        perProvider: { [B]: 900n },
        maxSubscriptionCommitment: 600n,
      });
      await fc.assert(
        fc.asyncProperty(spendArb, async ({ settle, early: _, ...spend }) => {
          const room = availableFor(await ledger.report(agent), spend);
          let reserved = true;
          try {
            const hold = await ledger.reserve(agent, spend);
            if (settle === "release") await ledger.release(hold);
            else await ledger.commit(hold, settle === "all" || settle > hold.amount ? undefined : settle);
          } catch (error) {
            if (!isTollgateError(error, "BudgetExceeded")) throw error;
            reserved = false;
          }
          expect(reserved).toBe(room === undefined || spend.amount <= room);
        }),
        { numRuns: 60 },
      );
    });
  });
}

describe("budget ledger on PGlite", () => {
  ledgerSuite(() => createTestStore());
});

describe.runIf(databaseUrl)("budget ledger on PostgreSQL", () => {
  ledgerSuite(() => createTestStore({ databaseUrl }));
});
