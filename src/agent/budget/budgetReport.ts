import { type Address, getAddress } from "viem";
import type { AgentId, BudgetLimits, SpendKind } from "./budgetLimits.ts";
import { SpendKinds } from "./budgetLimits.ts";

/** Spent and reserved amounts of one group of spends. */
export type SpendTally = { spent: bigint; reserved: bigint };

/**
 * Where an agent stands against its limits at one moment (`at`). "Spent" is committed; "reserved" is
 * held by unexpired reservations; "remaining" is limit − spent − reserved, never below zero, and
 * `undefined` when the limit is not set. Everything is in the token's smallest unit.
 */
export type BudgetReport = {
  agent: AgentId;
  at: Date;
  limits: BudgetLimits;
  spent: { total: bigint; daily: bigint };
  reserved: { total: bigint; daily: bigint };
  remaining: {
    total: bigint | undefined;
    daily: bigint | undefined;
    /** The largest single one-time or metered spend the per-call limit allows. */
    perCall: bigint | undefined;
    maxSubscriptionCommitment: bigint | undefined;
  };
  subscriptions: {
    /** Sum of the period prices of active subscriptions. */
    committed: bigint;
    /** Sum of subscription reservations not yet committed. */
    reserved: bigint;
    active: { ref: string; provider: Address; amount: bigint }[];
    pending: { ref: string | undefined; amount: bigint }[];
    /**
     * Standing holds: what the agent's subscriptions may still pull on chain (overage caps, the next
     * renewal). Counted as reserved against the total, daily and per-provider limits until charged
     * or released; they do not expire.
     */
    held: bigint;
    holds: { ref: string; provider: Address; held: bigint }[];
  };
  /** Every provider the agent has a limit for or has spent with, ordered by address. */
  perProvider: {
    provider: Address;
    spent: bigint;
    reserved: bigint;
    limit: bigint | undefined;
    remaining: bigint | undefined;
  }[];
  perKind: Record<SpendKind, SpendTally>;
};

/** Amounts as the ledger reads them from the store, providers lowercase. */
export type BudgetUsage = {
  /** Committed, all time, per provider and kind. */
  totals: { provider: string; kind: SpendKind; spent: bigint }[];
  /** Committed within the rolling day, per provider and kind. */
  daily: { provider: string; kind: SpendKind; spent: bigint }[];
  /** Unexpired reservations; `inDay` when reserved within the rolling day. */
  open: { provider: string; kind: SpendKind; ref: string | undefined; amount: bigint; inDay: boolean }[];
  activeSubscriptions: { ref: string; provider: string; amount: bigint }[];
  /** Standing holds with something left (`agent_holds.held > 0`). */
  holds?: { ref: string; provider: string; held: bigint }[] | undefined;
};

function remainingOf(limit: bigint | undefined, used: bigint): bigint | undefined {
  if (limit === undefined) return undefined;
  return limit > used ? limit - used : 0n;
}

function sum(values: readonly bigint[]): bigint {
  return values.reduce((a, b) => a + b, 0n);
}

/** Builds the report from limits and usage; pure, so checks and `report()` agree by construction. */
export function buildBudgetReport(input: {
  agent: AgentId;
  at: Date;
  limits: BudgetLimits;
  usage: BudgetUsage;
}): BudgetReport {
  const { limits, usage } = input;
  const spentTotal = sum(usage.totals.map((t) => t.spent));
  const spentDaily = sum(usage.daily.map((t) => t.spent));
  const holds = (usage.holds ?? []).map((h) => ({
    ref: h.ref,
    provider: getAddress(h.provider),
    held: h.held,
  }));
  const held = sum(holds.map((h) => h.held));
  // A standing hold may be pulled at any moment, so it counts in the rolling day whenever it was made:
  // otherwise a renewal charged today against a hold made last week could pass today's limit.
  const reservedTotal = sum(usage.open.map((o) => o.amount)) + held;
  const reservedDaily = sum(usage.open.filter((o) => o.inDay).map((o) => o.amount)) + held;
  const perKind = perKindTallies(usage, held);
  const perProvider = perProviderReport(limits, usage, holds);
  const subscriptions = subscriptionsReport(usage, held, holds);

  return {
    agent: input.agent,
    at: input.at,
    limits,
    spent: { total: spentTotal, daily: spentDaily },
    reserved: { total: reservedTotal, daily: reservedDaily },
    remaining: {
      total: remainingOf(limits.total, spentTotal + reservedTotal),
      daily: remainingOf(limits.daily, spentDaily + reservedDaily),
      perCall: limits.perCall,
      maxSubscriptionCommitment: remainingOf(
        limits.maxSubscriptionCommitment,
        subscriptions.committed + subscriptions.reserved,
      ),
    },
    subscriptions,
    perProvider,
    perKind,
  };
}

/** Spent and reserved per kind of spend; standing holds are subscription reservations. */
function perKindTallies(usage: BudgetUsage, held: bigint): Record<SpendKind, SpendTally> {
  const perKind = Object.fromEntries(SpendKinds.map((k) => [k, { spent: 0n, reserved: 0n }])) as Record<
    SpendKind,
    SpendTally
  >;
  for (const t of usage.totals) perKind[t.kind].spent += t.spent;
  for (const o of usage.open) perKind[o.kind].reserved += o.amount;
  perKind.subscription.reserved += held;
  return perKind;
}

/** Every provider with a limit or a spend, ordered by lowercase address, with what it has left. */
function perProviderReport(
  limits: BudgetLimits,
  usage: BudgetUsage,
  holds: BudgetReport["subscriptions"]["holds"],
): BudgetReport["perProvider"] {
  const providers = new Map<string, SpendTally>();
  const tallyOf = (provider: string): SpendTally => {
    const key = provider.toLowerCase();
    let tally = providers.get(key);
    if (tally === undefined) {
      tally = { spent: 0n, reserved: 0n };
      providers.set(key, tally);
    }
    return tally;
  };
  for (const provider of Object.keys(limits.perProvider ?? {})) tallyOf(provider);
  for (const t of usage.totals) tallyOf(t.provider).spent += t.spent;
  for (const o of usage.open) tallyOf(o.provider).reserved += o.amount;
  for (const h of holds) tallyOf(h.provider).reserved += h.held;
  const providerLimits = new Map(
    Object.entries(limits.perProvider ?? {}).map(([provider, limit]) => [provider.toLowerCase(), limit]),
  );
  return [...providers.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([provider, tally]) => {
      const limit = providerLimits.get(provider);
      return {
        provider: getAddress(provider),
        spent: tally.spent,
        reserved: tally.reserved,
        limit,
        remaining: remainingOf(limit, tally.spent + tally.reserved),
      };
    });
}

/** Active subscriptions, the reservations for ones not yet taken out, and the standing holds. */
function subscriptionsReport(
  usage: BudgetUsage,
  held: bigint,
  holds: BudgetReport["subscriptions"]["holds"],
): BudgetReport["subscriptions"] {
  const active = usage.activeSubscriptions.map((s) => ({
    ref: s.ref,
    provider: getAddress(s.provider),
    amount: s.amount,
  }));
  const pending = usage.open
    .filter((o) => o.kind === "subscription")
    .map((o) => ({ ref: o.ref, amount: o.amount }));
  return {
    committed: sum(active.map((s) => s.amount)),
    reserved: sum(pending.map((p) => p.amount)),
    active,
    pending,
    held,
    holds,
  };
}
