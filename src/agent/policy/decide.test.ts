import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseUnitsExact as usd } from "../../protocol/amount.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import type { BudgetLimitsInput } from "../budget/budgetLimits.ts";
import { BudgetLimitsSchema } from "../budget/budgetLimits.ts";
import { type BudgetUsage, buildBudgetReport } from "../budget/budgetReport.ts";
import { decide, describeInterval, type PolicyInput } from "./decide.ts";
import type { PolicyOfferInput } from "./policyOffer.ts";

const PROVIDER = "0x1111111111111111111111111111111111111111";
const DAY = 86_400;
const MONTH = 30 * DAY;

/** 0.01 USDC per call, or 0.50 USDC per 30 days with no metering. */
const offer: PolicyOfferInput = {
  provider: PROVIDER,
  oneTime: { amount: usd("0.01") },
  subscription: { planId: "3", amount: usd("0.5"), interval: MONTH },
};

function report(limits: BudgetLimitsInput, usage: Partial<BudgetUsage> = {}) {
  return buildBudgetReport({
    agent: "tester",
    at: new Date(0),
    limits: BudgetLimitsSchema.parse(limits),
    usage: { totals: [], daily: [], open: [], activeSubscriptions: [], ...usage },
  });
}

describe("decide with a forecast", () => {
  it("subscribes when 100 calls are forecast for the period", () => {
    const decision = decide({ offer, forecast: { calls: 100, horizonSeconds: MONTH } });
    expect(decision.mode).toBe("subscribe");
    expect(decision.basis).toBe("forecast");
    expect(decision.costs).toEqual({
      oneTime: usd("1"),
      subscription: usd("0.5"),
      oneTimePrice: usd("0.01"),
      planPrice: usd("0.5"),
      overage: 0n,
      calls: 100,
    });
    expect(decision.reason).toContain("0.5 USDC");
    expect(decision.reason).toContain("100 calls");
    expect(decision.reason).toMatch(/subscribe\.$/);
  });

  it("pays once when 2 calls are forecast", () => {
    const decision = decide({ offer, forecast: { calls: 2, horizonSeconds: MONTH } });
    expect(decision.mode).toBe("one-time");
    expect(decision.costs.oneTime).toBe(usd("0.02"));
    expect(decision.costs.subscription).toBe(usd("0.5"));
    expect(decision.reason).toMatch(/pay once\.$/);
  });

  it("pays once on a tie: it commits to nothing", () => {
    expect(decide({ offer, forecast: { calls: 50, horizonSeconds: MONTH } }).mode).toBe("one-time");
    expect(decide({ offer, forecast: { calls: 51, horizonSeconds: MONTH } }).mode).toBe("subscribe");
  });

  it("scales a horizon longer than the period to one period, and takes a shorter one as is", () => {
    // 100 calls in 60 days are 50 per 30-day period: a tie, so pay once.
    const long = decide({ offer, forecast: { calls: 100, horizonSeconds: 2 * MONTH } });
    expect(long.costs.calls).toBe(50);
    expect(long.mode).toBe("one-time");
    // 100 calls in one day: the period holds at least those 100.
    const short = decide({ offer, forecast: { calls: 100, horizonSeconds: DAY } });
    expect(short.costs.calls).toBe(100);
    expect(short.mode).toBe("subscribe");
  });

  it("compares fractional calls per period exactly", () => {
    // 7 calls in 3 days with a 1-day plan: 7/3 calls per period, 7/3 USDC paying once.
    const base = { provider: PROVIDER, oneTime: { amount: usd("1") } };
    const at = (planPrice: string) =>
      decide({
        offer: { ...base, subscription: { amount: usd(planPrice), interval: DAY } },
        forecast: { calls: 7, horizonSeconds: 3 * DAY },
      });
    expect(at("2.333334").mode).toBe("one-time");
    expect(at("2.333333").mode).toBe("subscribe");
    expect(at("2.333333").costs.oneTime).toBe(usd("2.333334")); // rounded up for display
  });

  it("counts overage beyond the included units", () => {
    const metered: PolicyOfferInput = {
      ...offer,
      subscription: {
        amount: usd("0.5"),
        interval: MONTH,
        includedUnits: 50,
        overageUnitPrice: usd("0.02"),
      },
    };
    const decision = decide({ offer: metered, forecast: { calls: 100, horizonSeconds: MONTH } });
    expect(decision.costs.overage).toBe(usd("1"));
    expect(decision.costs.subscription).toBe(usd("1.5"));
    expect(decision.mode).toBe("one-time");
    // Each call using 2 units doubles the overage.
    const heavy = decide({
      offer: metered,
      forecast: { calls: 100, horizonSeconds: MONTH },
      unitsPerCall: 2,
    });
    expect(heavy.costs.overage).toBe(usd("3"));
  });
});

describe("decide without a forecast (break-even rule)", () => {
  it("switches to subscribing exactly when the period's one-time spend would reach the plan price", () => {
    const even = {
      provider: PROVIDER,
      oneTime: { amount: usd("1") },
      subscription: { amount: usd("10"), interval: MONTH },
    };
    // 8 calls paid once: the 9th would make 9 USDC < 10.
    const before = decide({ offer: even, history: 8 });
    expect(before.mode).toBe("one-time");
    expect(before.basis).toBe("break-even");
    expect(before.costs.oneTime).toBe(usd("9"));
    // 9 calls paid once: the 10th would make 10 USDC, reaching the plan price.
    const at = decide({ offer: even, history: 9 });
    expect(at.mode).toBe("subscribe");
    expect(at.costs.oneTime).toBe(usd("10"));
    expect(at.reason).toContain("reaching");
  });

  it("switches on the call that would pass the plan price when the prices do not divide", () => {
    const uneven = {
      provider: PROVIDER,
      oneTime: { amount: usd("3") },
      subscription: { amount: usd("10"), interval: MONTH },
    };
    expect(decide({ offer: uneven, history: 2 }).mode).toBe("one-time"); // 9 < 10
    expect(decide({ offer: uneven, history: 3 }).mode).toBe("subscribe"); // 12 >= 10
  });

  it("treats a missing history as the first call of the period", () => {
    expect(decide({ offer }).costs.calls).toBe(1);
    expect(decide({ offer }).mode).toBe("one-time");
  });

  it("adds the overage the same calls would cost under the plan", () => {
    // Plan 1 USDC with no included units and 0.5 USDC per call: 2 calls cost 2 paid once, 2 subscribed.
    const metered = {
      provider: PROVIDER,
      oneTime: { amount: usd("1") },
      subscription: { amount: usd("1"), interval: MONTH, overageUnitPrice: usd("0.5") },
    };
    expect(decide({ offer: metered, history: 0 }).mode).toBe("one-time"); // 1 < 1.5
    expect(decide({ offer: metered, history: 1 }).mode).toBe("subscribe"); // 2 >= 2
  });
});

describe("decide within a budget", () => {
  it("pays once, saying why, when the subscription would pass the commitment ceiling", () => {
    const decision = decide({
      offer,
      forecast: { calls: 100, horizonSeconds: MONTH },
      budget: report({ maxSubscriptionCommitment: usd("0.4") }),
    });
    expect(decision.mode).toBe("one-time");
    expect(decision.reason).toContain("maxSubscriptionCommitment");
    expect(decision.reason).toContain("pay once instead");
    expect(decision.available).toEqual({ oneTime: undefined, subscription: usd("0.4") });
  });

  it("counts active subscriptions against the ceiling", () => {
    const budget = report(
      { maxSubscriptionCommitment: usd("1") },
      { activeSubscriptions: [{ ref: "other", provider: PROVIDER, amount: usd("0.6") }] },
    );
    expect(decide({ offer, forecast: { calls: 100, horizonSeconds: MONTH }, budget }).mode).toBe("one-time");
  });

  it("refuses, naming both limits, when neither choice fits", () => {
    const decision = decide({
      offer,
      forecast: { calls: 100, horizonSeconds: MONTH },
      budget: report(
        { total: usd("1") },
        { totals: [{ provider: PROVIDER, kind: "one-time", spent: usd("0.995") }] },
      ),
    });
    expect(decision.mode).toBe("refuse");
    expect(decision.reason).toMatch(/^Neither choice fits the budget/);
    expect(decision.reason).toContain("total limit");
    expect(decision.available).toEqual({ oneTime: usd("0.005"), subscription: usd("0.005") });
  });

  it("subscribes when paying once is above the per-call limit but the plan fits", () => {
    const decision = decide({
      offer,
      forecast: { calls: 2, horizonSeconds: MONTH },
      budget: report({ perCall: usd("0.005"), maxSubscriptionCommitment: usd("5") }),
    });
    expect(decision.mode).toBe("subscribe");
    expect(decision.reason).toContain("perCall");
  });

  it("refuses a one-time-only offer above the per-provider room", () => {
    const decision = decide({
      offer: { provider: PROVIDER, oneTime: { amount: usd("0.01") } },
      budget: report({ perProvider: { [PROVIDER]: usd("0.001") } }),
    });
    expect(decision).toMatchObject({ mode: "refuse", basis: "single-option" });
    expect(decision.reason).toContain("perProvider");
  });

  it("notes when the budget covers only part of the forecast", () => {
    const decision = decide({
      offer,
      forecast: { calls: 40, horizonSeconds: MONTH },
      budget: report({ total: usd("0.25"), maxSubscriptionCommitment: 0n }),
    });
    expect(decision.mode).toBe("one-time");
    expect(decision.reason).toContain("covers only 25 of the forecast calls");
  });

  it("does not read the per-call limit as room for the forecast: it bounds each call alone", () => {
    const decision = decide({
      offer,
      forecast: { calls: 40, horizonSeconds: MONTH },
      budget: report({ total: usd("5"), perCall: usd("0.05"), maxSubscriptionCommitment: 0n }),
    });
    expect(decision.mode).toBe("one-time");
    expect(decision.reason).not.toContain("covers only");
  });

  it("weighs a purchase for an admitted sale against what the sale holds, not the budget's rest", () => {
    const SALE = "0x0000000000000000000000000000000000000000";
    // The sale's 0.04 is all the total allows: outside it nothing is left.
    const full = report(
      { total: usd("0.04"), perProvider: { [PROVIDER]: usd("0.015") } },
      { open: [{ provider: SALE, kind: "one-time", ref: "sale:1", amount: usd("0.04"), inDay: true }] },
    );
    const once = { provider: PROVIDER, oneTime: { amount: usd("0.01") } };
    expect(decide({ offer: once, budget: full }).mode).toBe("refuse");
    const funded = decide({ offer: once, budget: full, sale: usd("0.04") });
    expect(funded.mode).toBe("one-time");
    expect(funded.available.oneTime).toBe(usd("0.015")); // the per-provider limit still bounds it
    // What the sale still holds bounds it too, and says so.
    const short = decide({ offer: once, budget: full, sale: usd("0.005") });
    expect(short.mode).toBe("refuse");
    expect(short.reason).toContain("the 0.005 USDC the sale reservation leaves");
    // The supplier's own part of the sale: its per-provider limit was met at admission.
    const part = decide({ offer: once, budget: full, sale: usd("0.02"), saleForProvider: true });
    expect(part.available.oneTime).toBe(usd("0.02"));
    // A subscription is the spender's own, outside the sale: the budget's rest decides it.
    const subscribeOnly = { provider: PROVIDER, subscription: offer.subscription! };
    expect(decide({ offer: subscribeOnly, budget: full, sale: usd("0.04") }).mode).toBe("refuse");
  });
});

describe("decide: other offers and input", () => {
  it("takes the only choice offered", () => {
    expect(decide({ offer: { provider: PROVIDER, oneTime: { amount: 5n } } })).toMatchObject({
      mode: "one-time",
      basis: "single-option",
      costs: { subscription: undefined },
    });
    expect(
      decide({
        offer: { provider: PROVIDER, subscription: { amount: 5n, interval: DAY } },
        forecast: { calls: 1, horizonSeconds: DAY },
      }),
    ).toMatchObject({ mode: "subscribe", basis: "single-option", costs: { oneTime: undefined } });
  });

  it("does not subscribe to a plan that renews more often than the keeper looks: pays once instead, or refuses", () => {
    const fast = { ...offer, subscription: { planId: "9", amount: usd("0.01"), interval: 5 } };
    const paysOnce = decide({ offer: fast, forecast: { calls: 1_000, horizonSeconds: 60 } });
    expect(paysOnce.mode).toBe("one-time");
    expect(paysOnce.reason).toContain(
      "renews every 5 seconds, more often than the budget's keeper looks (every 1 minute)",
    );
    expect(decide({ offer: { provider: PROVIDER, subscription: fast.subscription } }).mode).toBe("refuse");
    // A keeper that looks every 5 seconds may take it.
    expect(
      decide({ offer: fast, forecast: { calls: 1_000, horizonSeconds: 60 }, minPlanIntervalSeconds: 5 }).mode,
    ).toBe("subscribe");
  });

  it("refuses an offer with no choice in it", () => {
    expect(decide({ offer: { provider: PROVIDER } })).toMatchObject({ mode: "refuse", basis: "no-option" });
  });

  it("logs every decision with its reason and costs", () => {
    const lines: { obj: Record<string, unknown>; msg: string }[] = [];
    const logger = {
      info: (obj: object, msg: string) => lines.push({ obj: obj as Record<string, unknown>, msg }),
    };
    const decision = decide({ offer, history: 60 }, { logger });
    expect(lines).toHaveLength(1);
    expect(lines[0]?.msg).toBe("policy decision");
    expect(lines[0]?.obj).toMatchObject({
      mode: "subscribe",
      basis: "break-even",
      reason: decision.reason,
      planId: "3",
      costs: { oneTime: "610000", subscription: "500000", calls: 61 },
    });
  });

  it("refuses malformed input with InvalidRequest", () => {
    const bad = [
      { offer, forecast: { calls: -1, horizonSeconds: DAY } },
      { offer, forecast: { calls: 1, horizonSeconds: 0 } },
      { offer: { ...offer, oneTime: { amount: 0n } } },
      { offer: { provider: "not an address" } },
      { offer, history: 1.5 },
    ];
    for (const input of bad) {
      let error: unknown;
      try {
        decide(input as PolicyInput);
      } catch (e) {
        error = e;
      }
      expect(
        isTollgateError(error, "InvalidRequest"),
        JSON.stringify(input, (_k, v) => (typeof v === "bigint" ? `${v}` : v)),
      ).toBe(true);
    }
  });

  it("names intervals in the largest whole unit", () => {
    expect(describeInterval(MONTH)).toBe("30 days");
    expect(describeInterval(3600)).toBe("1 hour");
    expect(describeInterval(90)).toBe("90 seconds");
    expect(describeInterval(120)).toBe("2 minutes");
  });
});

describe("decide: properties", () => {
  const offerArb = fc.record({
    provider: fc.constant(PROVIDER),
    oneTime: fc.option(fc.record({ amount: fc.bigInt({ min: 1n, max: 10_000n }) }), { nil: undefined }),
    subscription: fc.option(
      fc.record({
        amount: fc.bigInt({ min: 1n, max: 1_000_000n }),
        interval: fc.integer({ min: 60, max: 90 * DAY }),
        includedUnits: fc.integer({ min: 0, max: 500 }),
        overageUnitPrice: fc.bigInt({ min: 0n, max: 20_000n }),
      }),
      { nil: undefined },
    ),
  });
  const inputArb = fc.record({
    offer: offerArb,
    forecast: fc.option(
      fc.record({
        calls: fc.integer({ min: 0, max: 5000 }),
        horizonSeconds: fc.integer({ min: 1, max: 180 * DAY }),
      }),
      { nil: undefined },
    ),
    history: fc.option(fc.integer({ min: 0, max: 5000 }), { nil: undefined }),
    limits: fc.record(
      {
        total: fc.bigInt({ min: 0n, max: 2_000_000n }),
        perCall: fc.bigInt({ min: 0n, max: 20_000n }),
        maxSubscriptionCommitment: fc.bigInt({ min: 0n, max: 2_000_000n }),
      },
      { requiredKeys: [] },
    ),
  });

  it("never picks a choice the budget cannot pay, and refuses only when no offered choice fits", () => {
    fc.assert(
      fc.property(inputArb, ({ limits, ...input }) => {
        const decision = decide({ ...input, budget: report(limits) });
        const fitsOnce =
          input.offer.oneTime !== undefined &&
          (decision.available.oneTime === undefined ||
            input.offer.oneTime.amount <= decision.available.oneTime);
        const fitsPlan =
          input.offer.subscription !== undefined &&
          (decision.available.subscription === undefined ||
            input.offer.subscription.amount <= decision.available.subscription);
        if (decision.mode === "one-time") expect(fitsOnce).toBe(true);
        if (decision.mode === "subscribe") expect(fitsPlan).toBe(true);
        if (decision.mode === "refuse") expect(fitsOnce || fitsPlan).toBe(false);
        expect(decision.reason.length).toBeGreaterThan(20);
      }),
      { numRuns: 500 },
    );
  });

  it("with a forecast and room for both, picks the choice that costs less for the period", () => {
    fc.assert(
      fc.property(inputArb, ({ limits: _limits, ...input }) => {
        fc.pre(
          input.forecast !== undefined &&
            input.offer.oneTime !== undefined &&
            input.offer.subscription !== undefined,
        );
        const { costs, mode } = decide(input);
        if (mode === "subscribe") expect(costs.subscription!).toBeLessThanOrEqual(costs.oneTime!);
        else expect(costs.oneTime!).toBeLessThanOrEqual(costs.subscription!);
      }),
      { numRuns: 500 },
    );
  });
});

describe("decide with a channel", () => {
  const HOUR = 3_600;
  const withChannel: PolicyOfferInput = {
    provider: PROVIDER,
    oneTime: { amount: usd("0.01") },
    channel: { amount: usd("0.01"), minDeposit: usd("0.1") },
  };

  it("opens a channel sized for the forecast when 50 calls are expected within the hour", () => {
    const decision = decide({ offer: withChannel, forecast: { calls: 50, horizonSeconds: HOUR } });
    expect(decision.mode).toBe("channel");
    // 50 calls and a third more: the wallet renews at a quarter left, so all 50 fit on one channel.
    expect(decision.deposit).toBe(usd("0.67"));
    expect(decision.burstCalls).toBe(50);
    expect(decision.costs.channel).toBe(usd("0.5"));
    expect(decision.reason).toMatch(
      /prepaid channel at 0\.01 USDC per call.*no more than the one-time choice's 0\.5 USDC.*deposit of 0\.67 USDC/,
    );
  });

  it("pays once for a lone call and opens a channel on the third call of a burst (no forecast)", () => {
    const first = decide({ offer: withChannel, history: 0 });
    expect(first.mode).toBe("one-time");
    expect(first.reason).toMatch(/A channel is not worth its open and deposit: 1 calls expected/);
    const third = decide({ offer: withChannel, history: 2 });
    expect(third.mode).toBe("channel");
    // Three calls seen, four times as many expected, and a third more: 16 calls' deposit.
    expect(third.deposit).toBe(usd("0.16"));
  });

  it("caps the deposit at what the total limit leaves, in whole calls", () => {
    const decision = decide({
      offer: withChannel,
      forecast: { calls: 500, horizonSeconds: HOUR },
      budget: report({ total: usd("0.205") }),
    });
    expect(decision.mode).toBe("channel");
    expect(decision.deposit).toBe(usd("0.2"));
    expect(decision.reason).toMatch(/all the total limit leaves/);
  });

  it("pays once when the budget cannot hold the gate's minimum deposit, and says why", () => {
    const decision = decide({
      offer: withChannel,
      forecast: { calls: 500, horizonSeconds: HOUR },
      budget: report({ total: usd("0.05") }),
    });
    expect(decision.mode).toBe("one-time");
    expect(decision.deposit).toBeUndefined();
    expect(decision.reason).toMatch(
      /a channel needs a deposit of at least 0\.1 USDC, above the 0\.05 USDC the total limit leaves/,
    );
  });

  it("refuses a channel-only offer whose minimum deposit the budget cannot hold", () => {
    const decision = decide({
      offer: { provider: PROVIDER, channel: { amount: usd("0.01"), minDeposit: usd("1") } },
      budget: report({ total: usd("0.5") }),
    });
    expect(decision.mode).toBe("refuse");
    expect(decision.reason).toMatch(
      /Neither choice fits the budget: a channel needs a deposit of at least 1 USDC/,
    );
  });

  it("keeps a subscription that is cheaper than the channel for the forecast", () => {
    const decision = decide({
      offer: { ...withChannel, subscription: { planId: "3", amount: usd("0.5"), interval: MONTH } },
      forecast: { calls: 1_000, horizonSeconds: MONTH },
    });
    expect(decision.mode).toBe("subscribe");
    expect(decision.costs.channel).toBe(usd("10"));
  });

  it("prefers a channel cheaper per call than paying once even for a moderate burst", () => {
    const decision = decide({
      offer: { ...withChannel, oneTime: { amount: usd("0.02") } },
      forecast: { calls: 5, horizonSeconds: HOUR },
    });
    expect(decision.mode).toBe("channel");
    expect(decision.deposit).toBe(usd("0.1"));
  });
});
