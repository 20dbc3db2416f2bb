/**
 * The paid tool's own count of an agent's subscribed calls per plan and period: the floor under what a
 * gate states a metered call cost (src/schemes/metered/agent/meteredCharge.ts).
 */
import type { PolicyOffer } from "../policy/policyOffer.ts";

/** Plan terms of a subscription the agent holds, as the meter needs them. */
export type MeteredPlan = {
  planId: string;
  provider: string;
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
};

/**
 * Counts the units of an agent's subscribed calls per plan within the current period, so units past
 * the included ones are charged to the budget at the overage price as they happen (the gate deducts
 * the same amounts on chain). The period is counted from the first call seen; a renewal starts a new
 * count. It is the floor under what a gate states a call cost (meteredCharge.ts).
 */
export type UsageMeter = {
  planAt(origin: string): MeteredPlan | undefined;
  remember(origin: string, plan: MeteredPlan): void;
  /** Counts one call of `units` units (default 1); returns what it costs beyond the included units. */
  count(plan: MeteredPlan, nowMs: number, units?: number): bigint;
};

export function createUsageMeter(): UsageMeter {
  const plans = new Map<string, MeteredPlan>();
  const cycles = new Map<string, { since: number; units: number }>();
  return {
    planAt: (origin) => plans.get(origin),
    remember: (origin, plan) => {
      plans.set(origin, plan);
    },
    count(plan, nowMs, units = 1) {
      const key = `${plan.provider.toLowerCase()}:${plan.planId}`;
      let cycle = cycles.get(key);
      if (cycle === undefined || nowMs - cycle.since >= plan.interval * 1000) {
        cycle = { since: nowMs, units: 0 };
        cycles.set(key, cycle);
      }
      // Units past the included ones, of those this call adds (as the gate counts them).
      const before = Math.max(cycle.units - plan.includedUnits, 0);
      cycle.units += units;
      const after = Math.max(cycle.units - plan.includedUnits, 0);
      return plan.overageUnitPrice * BigInt(after - before);
    },
  };
}

/** The policy's view of a held plan, for the spend report of calls that met no 402. */
export function heldPlanOffer(plan: MeteredPlan | undefined): PolicyOffer | undefined {
  if (plan === undefined) return undefined;
  return {
    provider: plan.provider as `0x${string}`,
    subscription: {
      planId: plan.planId,
      amount: plan.amount,
      interval: plan.interval,
      includedUnits: plan.includedUnits,
      overageUnitPrice: plan.overageUnitPrice,
    },
  };
}
