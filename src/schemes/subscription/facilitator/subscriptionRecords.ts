/**
 * Rows of the subscription index (migration 0011), read through zod, and their wire forms. Every row
 * is scoped by chain id and manager address, so one database can index several deployments.
 */
import { type Address, getAddress } from "viem";
import { z } from "zod";
import type { PlanInfo, SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";

const AddressText = z.string().regex(/^0x[0-9a-f]{40}$/) as z.ZodType<`0x${string}`>;

export const IndexedStatusSchema = z.enum(["Active", "Paused", "Cancelled", "PastDue"]);
export type IndexedStatus = z.infer<typeof IndexedStatusSchema>;

export const PlanRowSchema = z.object({
  plan_id: BigintColumnSchema,
  provider: AddressText,
  token: AddressText,
  amount: BigintColumnSchema,
  interval_seconds: SafeIntColumnSchema,
  included_units: BigintColumnSchema,
  overage_unit_price: BigintColumnSchema,
  deprecated: z.boolean(),
  successor_plan_id: BigintColumnSchema.nullable(),
});
export type PlanRow = z.infer<typeof PlanRowSchema>;

export const SubscriptionRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  plan_id: BigintColumnSchema,
  subscriber: AddressText,
  provider: AddressText,
  status: IndexedStatusSchema,
  created_at_chain: SafeIntColumnSchema,
  period_start: SafeIntColumnSchema,
  current_period_end: SafeIntColumnSchema,
  paused_remaining: SafeIntColumnSchema,
  max_overage: BigintColumnSchema,
  overage_used: BigintColumnSchema,
  last_block: BigintColumnSchema,
  /** Why the last renewal failed (migration 0197); cleared when it renews. */
  renewal_failure_code: z.string().nullable().optional(),
  renewal_failure_message: z.string().nullable().optional(),
});
export type SubscriptionRow = z.infer<typeof SubscriptionRowSchema>;

/** Which deployment rows belong to. */
export type IndexScope = { chainId: number; manager: Address };

export function findPlan(db: Queryable, scope: IndexScope, planId: bigint): Promise<PlanRow | undefined> {
  return queryOneParsed(
    db,
    PlanRowSchema,
    "SELECT * FROM plans WHERE chain_id = $1 AND manager = $2 AND plan_id = $3",
    [scope.chainId, scope.manager.toLowerCase(), planId],
  );
}

export function findSubscription(
  db: Queryable,
  scope: IndexScope,
  subscriptionId: bigint,
): Promise<SubscriptionRow | undefined> {
  return queryOneParsed(
    db,
    SubscriptionRowSchema,
    "SELECT * FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3",
    [scope.chainId, scope.manager.toLowerCase(), subscriptionId],
  );
}

export function subscriptionsOf(
  db: Queryable,
  scope: IndexScope,
  subscriber: Address,
): Promise<SubscriptionRow[]> {
  return queryParsed(
    db,
    SubscriptionRowSchema,
    `SELECT * FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND subscriber = $3
     ORDER BY subscription_id`,
    [scope.chainId, scope.manager.toLowerCase(), subscriber.toLowerCase()],
  );
}

export function planToWire(plan: PlanRow): PlanInfo {
  return {
    planId: plan.plan_id.toString(),
    provider: getAddress(plan.provider),
    token: getAddress(plan.token),
    amount: plan.amount.toString(),
    interval: plan.interval_seconds,
    includedUnits: plan.included_units.toString(),
    overageUnitPrice: plan.overage_unit_price.toString(),
    deprecated: plan.deprecated,
    successorPlanId:
      plan.successor_plan_id === null || plan.successor_plan_id === 0n
        ? null
        : plan.successor_plan_id.toString(),
  };
}

/** A subscription as `subscriptions(id)` returns it, with the plan it belongs to. */
export type ChainSubscription = {
  subscriber: Address;
  planId: bigint;
  status: number;
  createdAt: bigint;
  periodStart: bigint;
  currentPeriodEnd: bigint;
  pausedRemaining: bigint;
  maxOverage: bigint;
  overageUsed: bigint;
  /** Read from the chain; the index (built from events) keeps neither. */
  spendLimit?: bigint | undefined;
  spent?: bigint | undefined;
};

/** A plan as `plans(id)` returns it. */
export type ChainPlan = {
  provider: Address;
  token: Address;
  amount: bigint;
  interval: bigint;
  includedUnits: bigint;
  overageUnitPrice: bigint;
  deprecated: boolean;
  successorPlanId: bigint;
};

export function chainPlanToRow(planId: bigint, plan: ChainPlan): PlanRow {
  return {
    plan_id: planId,
    provider: plan.provider.toLowerCase() as Address,
    token: plan.token.toLowerCase() as Address,
    amount: plan.amount,
    interval_seconds: Number(plan.interval),
    included_units: plan.includedUnits,
    overage_unit_price: plan.overageUnitPrice,
    deprecated: plan.deprecated,
    successor_plan_id: plan.successorPlanId,
  };
}

const statusNames = ["None", "Active", "Paused", "Cancelled", "PastDue"] as const;

/** The chain's status number as a wire status; `undefined` for None (no such subscription). */
export function statusOf(status: number): IndexedStatus | undefined {
  const name = statusNames[status];
  return name === undefined || name === "None" ? undefined : name;
}

export function subscriptionToWire(
  subscriptionId: bigint,
  sub: ChainSubscription,
  plan: PlanRow,
  chainTime: number,
  /** The index's row, for the reason of a failed renewal. */
  indexed?: Pick<SubscriptionRow, "renewal_failure_code" | "renewal_failure_message"> | undefined,
): SubscriptionInfo {
  const status = statusOf(sub.status);
  if (status === undefined) throw new Error(`subscription ${subscriptionId} does not exist`);
  const end = Number(sub.currentPeriodEnd);
  return {
    subscriptionId: subscriptionId.toString(),
    planId: sub.planId.toString(),
    subscriber: getAddress(sub.subscriber),
    provider: getAddress(plan.provider),
    token: getAddress(plan.token),
    amount: plan.amount.toString(),
    interval: plan.interval_seconds,
    status,
    createdAt: Number(sub.createdAt),
    periodStart: Number(sub.periodStart),
    currentPeriodEnd: end,
    nextChargeAt: status === "Active" || status === "PastDue" ? end : null,
    pausedRemaining: Number(sub.pausedRemaining),
    maxOverage: sub.maxOverage.toString(),
    overageUsed: sub.overageUsed.toString(),
    ...(sub.spendLimit === undefined ? {} : { spendLimit: sub.spendLimit.toString() }),
    ...(sub.spent === undefined ? {} : { spent: sub.spent.toString() }),
    ...(status === "PastDue" && indexed?.renewal_failure_code != null
      ? {
          renewalFailure: {
            code: indexed.renewal_failure_code,
            message: indexed.renewal_failure_message ?? "",
          },
        }
      : {}),
    chainTime,
  };
}

/** Inserts or refreshes a plan row. */
export async function upsertPlan(
  db: Queryable,
  scope: IndexScope,
  plan: PlanRow,
  createdTx: string | null,
): Promise<void> {
  await db.query(
    `INSERT INTO plans (chain_id, manager, plan_id, provider, token, amount, interval_seconds, included_units,
       overage_unit_price, deprecated, successor_plan_id, created_tx)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (chain_id, manager, plan_id) DO UPDATE SET deprecated = EXCLUDED.deprecated,
       successor_plan_id = EXCLUDED.successor_plan_id, updated_at = now()`,
    [
      scope.chainId,
      scope.manager.toLowerCase(),
      plan.plan_id,
      plan.provider.toLowerCase(),
      plan.token.toLowerCase(),
      plan.amount,
      plan.interval_seconds,
      plan.included_units,
      plan.overage_unit_price,
      plan.deprecated,
      plan.successor_plan_id,
      createdTx,
    ],
  );
}

/** Inserts or overwrites a subscription row from its chain state. */
export async function upsertSubscription(
  db: Queryable,
  scope: IndexScope,
  p: {
    subscriptionId: bigint;
    sub: ChainSubscription;
    provider: Address;
    block: bigint;
    createdTx: string | null;
  },
): Promise<void> {
  const status = statusOf(p.sub.status);
  if (status === undefined) return;
  await db.query(
    `INSERT INTO subscriptions (chain_id, manager, subscription_id, plan_id, subscriber, provider, status,
       created_at_chain, period_start, current_period_end, paused_remaining, max_overage, overage_used,
       created_tx, last_block)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
     ON CONFLICT (chain_id, manager, subscription_id) DO UPDATE SET status = EXCLUDED.status,
       period_start = EXCLUDED.period_start, current_period_end = EXCLUDED.current_period_end,
       paused_remaining = EXCLUDED.paused_remaining, max_overage = EXCLUDED.max_overage,
       overage_used = EXCLUDED.overage_used, last_block = EXCLUDED.last_block, updated_at = now()`,
    [
      scope.chainId,
      scope.manager.toLowerCase(),
      p.subscriptionId,
      p.sub.planId,
      p.sub.subscriber.toLowerCase(),
      p.provider.toLowerCase(),
      status,
      p.sub.createdAt,
      p.sub.periodStart,
      p.sub.currentPeriodEnd,
      p.sub.pausedRemaining,
      p.sub.maxOverage,
      p.sub.overageUsed,
      p.createdTx,
      p.block,
    ],
  );
}
