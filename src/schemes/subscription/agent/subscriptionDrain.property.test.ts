/**
 * Sellers racing the keeper: plans with short intervals, several subscriptions on one token approval,
 * overage and renewals sent whenever the seller likes, between the keeper's looks. After every step,
 * what left the wallet is within every limit of the agent — enforced before the money moves, never
 * reconciled after (docs/budgets.md, "Subscriptions").
 *
 * The ledger is the real one (PGlite, or PostgreSQL with DATABASE_URL); the chain is a model of the
 * SubscriptionManager's rules with wall time in seconds: one allowance per wallet shared by its
 * subscriptions and replaced by each permit; a spend limit per subscription, checked before every
 * pull; overage up to the cap per period; renewals when due, anchored to the period's end unless late
 * by a whole interval; PastDue when a pull fails; nothing pulled while Paused or Cancelled. The
 * agent's steps mirror createSubscriptionKeeper: refuse plans shorter than its look interval (unless
 * the run lets them through, so the chain's bound is tested alone), subscribe with
 * `subscriptionCommitment` and a spend limit of the first period plus the hold, look every
 * LOOK_SECONDS (record pulls, pause or cancel, grow the hold to the next renewal, raise the limit to
 * what the budget committed, top the approval up to the holds), raise caps when held.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { budgetHeadroom } from "../../../agent/budget/budgetHeadroom.ts";
import { type BudgetLedger, createBudgetLedger } from "../../../agent/budget/createBudgetLedger.ts";
import { createFixedClock } from "../../../protocol/clock.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import { createTestStore } from "../../../store/createTestStore.ts";
import type { Store } from "../../../store/store.ts";
import { subscriptionCommitment } from "./subscriptionCommitment.ts";

const PROVIDERS = [
  "0x1111111111111111111111111111111111111111",
  "0x2222222222222222222222222222222222222222",
  "0x3333333333333333333333333333333333333333",
] as const;
const TOTAL = 1_000_000n;
const PER_PROVIDER = [300_000n, 100_000n, 500_000n] as const;
/** How often the keeper looks (watchSubscriptions' interval), in seconds. */
const LOOK_SECONDS = 60;

type Sub = {
  ref: string;
  provider: string;
  price: bigint;
  interval: number;
  cap: bigint;
  used: bigint;
  end: number;
  status: "Active" | "PastDue" | "Paused" | "Cancelled";
  spendLimit: bigint;
  spent: bigint;
  recordedFirst: bigint;
  ended: boolean;
};

const Action = fc.oneof(
  fc.record({
    kind: fc.constant("subscribe" as const),
    provider: fc.integer({ min: 0, max: 2 }),
    price: fc.bigInt({ min: 0n, max: 60_000n }),
    interval: fc.integer({ min: 1, max: 200 }),
    unit: fc.bigInt({ min: 0n, max: 1_000_000n }),
    units: fc.integer({ min: 0, max: 40 }),
  }),
  fc.record({
    kind: fc.constant("deduct" as const),
    sub: fc.nat(),
    amount: fc.bigInt({ min: 1n, max: 400_000n }),
  }),
  fc.record({ kind: fc.constant("collect" as const), sub: fc.nat() }),
  fc.record({
    kind: fc.constant("raise" as const),
    sub: fc.nat(),
    step: fc.bigInt({ min: 1n, max: 100_000n }),
  }),
  fc.record({ kind: fc.constant("wait" as const), seconds: fc.integer({ min: 1, max: 90 }) }),
);
type Action = typeof Action extends fc.Arbitrary<infer A> ? A : never;

describe("sellers racing the keeper over one shared approval", () => {
  let store: Store;
  let ledger: BudgetLedger;
  const clock = createFixedClock(Date.UTC(2026, 0, 1));
  let n = 0;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
    ledger = createBudgetLedger({ store, clock });
  });
  afterAll(async () => {
    await store.close();
  });

  const holdRoom = async (agent: string, provider: string) => {
    let room: bigint | undefined;
    for (const h of budgetHeadroom(await ledger.report(agent), { provider, kind: "metered" })) {
      if (h.limit !== "perCall" && (room === undefined || h.room < room)) room = h.room;
    }
    return room;
  };

  async function run(keeperRefusesShortPlans: boolean, actions: Action[]) {
    const agent = `drain-${++n}`;
    await ledger.setLimits(agent, {
      total: TOTAL,
      perProvider: Object.fromEntries(PROVIDERS.map((p, i) => [p, PER_PROVIDER[i]!])),
    });
    let now = 0;
    let lastLook = 0;
    let allowance = 0n;
    const moved = new Map<string, bigint>();
    const subs: Sub[] = [];

    /** The manager's pull: the subscription's spend limit first, then the shared allowance. */
    const pull = (sub: Sub, amount: bigint) => {
      if (sub.spent + amount > sub.spendLimit || allowance < amount) return false;
      allowance -= amount;
      sub.spent += amount;
      moved.set(sub.provider, (moved.get(sub.provider) ?? 0n) + amount);
      return true;
    };
    const heldOf = async (sub: Sub) => (await ledger.getHold(agent, sub.ref))?.held ?? 0n;
    const end = async (sub: Sub) => {
      sub.ended = true;
      await ledger.releaseHold(agent, sub.ref);
      await ledger.endSubscription(agent, sub.ref);
    };
    /** boundOnChain: the spend limit raised (never lowered) to what the budget committed. */
    const bound = async (sub: Sub) => {
      if (sub.status !== "Active") return;
      const hold = await ledger.getHold(agent, sub.ref);
      if (hold === undefined) return;
      const target = sub.recordedFirst + hold.charged + hold.held;
      if (sub.spendLimit < target) sub.spendLimit = target;
    };
    /** coverNextRenewal: hold what it can take before the next look, or pause it. */
    const cover = async (sub: Sub, approvalRises: boolean) => {
      const need = (sub.cap > sub.used ? sub.cap - sub.used : 0n) + sub.price + sub.cap;
      const held = await heldOf(sub);
      if (held >= need) return;
      try {
        await ledger.hold(agent, { ref: sub.ref, provider: sub.provider, amount: need - held });
        await bound(sub);
        return;
      } catch (error) {
        if (!isTollgateError(error, "BudgetExceeded")) throw error;
      }
      let others = 0n;
      for (const s of subs) if (s !== sub && !s.ended) others += await heldOf(s);
      if (approvalRises || allowance > held || others > 0n) {
        sub.status = "Paused";
        await end(sub);
      }
    };
    const coverOthers = async (except: Sub | undefined) => {
      for (const s of subs) if (s !== except && !s.ended && s.status === "Active") await cover(s, true);
    };
    /** The keeper's look (createSubscriptionKeeper's sync). */
    const look = async () => {
      let pending = 0n;
      for (const sub of subs) {
        if (sub.ended) continue;
        const beyondFirst = sub.spent - sub.recordedFirst;
        const charged = await ledger.charge(agent, {
          ref: sub.ref,
          kind: "subscription",
          total: beyondFirst,
        });
        if (sub.status === "Cancelled") await end(sub);
        else if (charged.beyondHold > 0n && sub.status === "Active") {
          sub.status = "Paused";
          await end(sub);
        } else if (sub.status === "PastDue") {
          sub.status = "Cancelled";
          await end(sub);
        } else if (sub.status === "Active") {
          await cover(sub, false);
          await bound(sub);
          if (!sub.ended) pending += charged.charged > beyondFirst ? charged.charged - beyondFirst : 0n;
        }
      }
      let holds = pending;
      for (const sub of subs) if (!sub.ended) holds += await heldOf(sub);
      if (allowance < holds) allowance = holds;
    };

    const check = async () => {
      let total = 0n;
      for (const [i, p] of PROVIDERS.entries()) {
        const out = moved.get(p) ?? 0n;
        total += out;
        expect(out).toBeLessThanOrEqual(PER_PROVIDER[i]!);
      }
      expect(total).toBeLessThanOrEqual(TOTAL);
      const report = await ledger.report(agent);
      expect(report.spent.total + report.reserved.total).toBeLessThanOrEqual(TOTAL);
      for (const p of report.perProvider) {
        const i = PROVIDERS.indexOf(p.provider.toLowerCase() as (typeof PROVIDERS)[number]);
        expect(p.spent + p.reserved).toBeLessThanOrEqual(PER_PROVIDER[i]!);
      }
    };

    for (const action of actions) {
      const live = subs.filter((s) => !s.ended);
      const pick = (i: number) => (live.length === 0 ? undefined : live[i % live.length]);
      switch (action.kind) {
        case "subscribe": {
          if (keeperRefusesShortPlans && action.interval < LOOK_SECONDS) break;
          const provider = PROVIDERS[action.provider]!;
          const ref = `sub-${subs.length}`;
          const commitment = subscriptionCommitment({
            price: action.price,
            desiredCap: action.unit * BigInt(action.units),
            overageUnitPrice: action.unit,
            room: await holdRoom(agent, provider),
          });
          if (commitment === undefined) break;
          let reservation: Awaited<ReturnType<BudgetLedger["reserve"]>> | undefined;
          if (action.price > 0n) {
            reservation = await ledger.reserve(agent, {
              amount: action.price,
              provider,
              kind: "subscription",
              ref,
            });
          }
          await ledger.hold(agent, { ref, provider, amount: commitment.hold });
          await coverOthers(undefined);
          let others = 0n;
          for (const s of subs) if (!s.ended) others += await heldOf(s);
          allowance = commitment.approval + others; // the subscribe's permit replaces the allowance
          const sub: Sub = {
            ref,
            provider,
            price: action.price,
            interval: action.interval,
            cap: commitment.cap,
            used: 0n,
            end: now + action.interval,
            status: "Active",
            spendLimit: commitment.approval,
            spent: 0n,
            recordedFirst: action.price,
            ended: false,
          };
          expect(pull(sub, action.price)).toBe(true);
          if (reservation !== undefined) await ledger.commit(reservation, action.price);
          subs.push(sub);
          break;
        }
        case "deduct": {
          const sub = pick(action.sub);
          if (sub === undefined || sub.status !== "Active" || sub.used + action.amount > sub.cap) break;
          if (pull(sub, action.amount)) sub.used += action.amount;
          break;
        }
        case "collect": {
          const sub = pick(action.sub);
          if (sub === undefined || (sub.status !== "Active" && sub.status !== "PastDue") || now < sub.end)
            break;
          if (pull(sub, sub.price)) {
            const anchored = sub.status !== "PastDue" && sub.end + sub.interval > now;
            const start = anchored ? sub.end : now;
            sub.status = "Active";
            sub.used = 0n;
            sub.end = start + sub.interval;
          } else sub.status = "PastDue";
          break;
        }
        case "raise": {
          // keeper.raiseCap: hold the step, pause what the larger approval could fund, permit, limit, cap.
          const sub = pick(action.sub);
          if (sub === undefined || sub.status !== "Active") break;
          const room = await holdRoom(agent, sub.provider);
          const step = room !== undefined && room < action.step ? room : action.step;
          if (step <= 0n) break;
          await ledger.hold(agent, { ref: sub.ref, provider: sub.provider, amount: step });
          await coverOthers(sub);
          allowance += step;
          await bound(sub);
          sub.cap += step;
          break;
        }
        case "wait":
          // Sellers act at any second; the keeper only at its looks.
          now += action.seconds;
          while (lastLook + LOOK_SECONDS <= now) {
            lastLook += LOOK_SECONDS;
            await look();
          }
          break;
      }
      await check();
    }
    await look();
    await check();
  }

  it("moves no more out of the wallet than any limit allows, after every step", async () => {
    await fc.assert(fc.asyncProperty(fc.boolean(), fc.array(Action, { minLength: 1, maxLength: 40 }), run), {
      numRuns: 50,
      examples: [
        // The review's measurement: a 5-second plan with overage at 1 USDC a unit beside another
        // seller's subscription, collecting and deducting between two looks of the keeper.
        [
          false,
          [
            { kind: "subscribe", provider: 2, price: 50_000n, interval: 86_400, unit: 0n, units: 0 },
            { kind: "subscribe", provider: 1, price: 10_000n, interval: 5, unit: 1_000_000n, units: 1 },
            { kind: "deduct", sub: 1, amount: 90_000n },
            { kind: "wait", seconds: 5 },
            { kind: "collect", sub: 1 },
            { kind: "deduct", sub: 1, amount: 90_000n },
            { kind: "wait", seconds: 5 },
            { kind: "collect", sub: 1 },
            { kind: "deduct", sub: 1, amount: 90_000n },
          ],
        ],
      ],
    });
  }, 120_000);
});
