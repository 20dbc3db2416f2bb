/**
 * One SubscriptionManager event applied to the index: its rows written and its event recorded, in the
 * caller's transaction (the chunk's, with its cursor). Each kind of event has its own function below.
 */
import { getAddress, type Hex } from "viem";
import { DeductionFailure } from "../../../chain/events/subscriptionStatus.ts";
import type { Queryable } from "../../../store/store.ts";
import {
  ensurePlan,
  ensureSubscription,
  subscriptionData,
  updateSubscription,
  usageRefOf,
} from "./indexedRows.ts";
import type { IndexerDeps, ManagerEvent } from "./indexerDeps.ts";
import { recordLogEvent } from "./indexLogEvents.ts";
import { renewalFailureOf } from "./renewalFailure.ts";
import { chainPlanToRow, upsertPlan, upsertSubscription } from "./subscriptionRecords.ts";

type ArgsOf<N extends ManagerEvent["eventName"]> = Extract<ManagerEvent, { eventName: N }>["args"];

/** The event being applied: where it was logged, in which transaction of the store. */
type Applying = {
  deps: IndexerDeps;
  tx: Queryable;
  block: bigint;
  where: {
    network: IndexerDeps["ctx"]["network"];
    manager: Hex;
    transaction: Hex;
    blockNumber: string;
    logIndex: number;
  };
};

export async function applyManagerEvent(
  deps: IndexerDeps,
  tx: Queryable,
  event: ManagerEvent,
): Promise<void> {
  const at: Applying = {
    deps,
    tx,
    block: event.blockNumber,
    where: {
      network: deps.ctx.network,
      manager: getAddress(deps.manager),
      transaction: event.transactionHash.toLowerCase() as Hex,
      blockNumber: event.blockNumber.toString(),
      logIndex: event.logIndex,
    },
  };
  switch (event.eventName) {
    case "PlanCreated":
      return planCreated(at, event.args);
    case "PlanDeprecated":
      return planDeprecated(at, event.args);
    case "OperatorSet":
      // Read from the chain when it matters (usage); nothing for the event log.
      return;
    case "SubscriptionCreated":
      return subscriptionCreated(at, event.args);
    case "SubscriptionRenewed":
      return subscriptionRenewed(at, event.args);
    case "RenewalFailed":
      return renewalFailed(at, event.args);
    case "SubscriptionPaused":
      return subscriptionPaused(at, event.args);
    case "SubscriptionResumed":
      return subscriptionResumed(at, event.args);
    case "SubscriptionCancelled":
      return subscriptionCancelled(at, event.args);
    case "MaxOverageSet":
      return maxOverageSet(at, event.args);
    case "AllowanceDeducted":
      return allowanceDeducted(at, event.args);
    case "DeductionFailed":
      return deductionFailed(at, event.args);
  }
}

const dataOf = (at: Applying, subscriptionId: bigint, status: string | undefined) =>
  subscriptionData(at.deps, at.tx, subscriptionId, at.block, status);

async function planCreated({ deps, tx, where }: Applying, a: ArgsOf<"PlanCreated">) {
  await upsertPlan(
    tx,
    deps.scope,
    chainPlanToRow(a.planId, {
      provider: a.provider,
      token: a.token,
      amount: a.amount,
      interval: a.interval,
      includedUnits: a.includedUnits,
      overageUnitPrice: a.overageUnitPrice,
      deprecated: false,
      successorPlanId: 0n,
    }),
    where.transaction,
  );
  await recordLogEvent(deps.ctx, tx, "plan.created", {
    planId: a.planId.toString(),
    provider: getAddress(a.provider),
    payTo: getAddress(a.provider),
    token: getAddress(a.token),
    amount: a.amount.toString(),
    interval: Number(a.interval),
    includedUnits: a.includedUnits.toString(),
    overageUnitPrice: a.overageUnitPrice.toString(),
    ...where,
  });
}

async function planDeprecated({ deps, tx, where }: Applying, a: ArgsOf<"PlanDeprecated">) {
  const plan = await ensurePlan(deps, tx, a.planId);
  await tx.query(
    `UPDATE plans SET deprecated = true, successor_plan_id = $4, updated_at = now()
     WHERE chain_id = $1 AND manager = $2 AND plan_id = $3`,
    [deps.ctx.chainId, deps.manager.toLowerCase(), a.planId, a.successorPlanId],
  );
  await recordLogEvent(deps.ctx, tx, "plan.deprecated", {
    planId: a.planId.toString(),
    successorPlanId: a.successorPlanId === 0n ? null : a.successorPlanId.toString(),
    provider: getAddress(plan.provider),
    payTo: getAddress(plan.provider),
    ...where,
  });
}

async function subscriptionCreated(at: Applying, a: ArgsOf<"SubscriptionCreated">) {
  const { deps, tx, where, block } = at;
  const plan = await ensurePlan(deps, tx, a.planId);
  await upsertSubscription(tx, deps.scope, {
    subscriptionId: a.subscriptionId,
    sub: {
      subscriber: a.subscriber,
      planId: a.planId,
      status: 1,
      createdAt: a.periodStart,
      periodStart: a.periodStart,
      currentPeriodEnd: a.periodEnd,
      pausedRemaining: 0n,
      maxOverage: a.maxOverage,
      overageUsed: 0n,
    },
    provider: plan.provider,
    block,
    createdTx: where.transaction,
  });
  await recordLogEvent(deps.ctx, tx, "subscription.created", {
    ...(await dataOf(at, a.subscriptionId, "Active")),
    amount: a.amount.toString(),
    periodStart: Number(a.periodStart),
    periodEnd: Number(a.periodEnd),
    maxOverage: a.maxOverage.toString(),
    ...where,
  });
}

async function subscriptionRenewed(at: Applying, a: ArgsOf<"SubscriptionRenewed">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  await updateSubscription(
    deps,
    tx,
    a.subscriptionId,
    block,
    "status = 'Active', period_start = $5, current_period_end = $6, overage_used = 0, renewal_failure_code = NULL, renewal_failure_message = NULL",
    [a.periodStart, a.periodEnd],
  );
  await recordLogEvent(deps.ctx, tx, "subscription.renewed", {
    ...(await dataOf(at, a.subscriptionId, "Active")),
    amount: a.amount.toString(),
    periodStart: Number(a.periodStart),
    periodEnd: Number(a.periodEnd),
    ...where,
  });
}

async function renewalFailed(at: Applying, a: ArgsOf<"RenewalFailed">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  // The reason decoded (AccountBlacklisted, InsufficientFunds, …), kept until the next renewal.
  const failure = renewalFailureOf(a.reason);
  await updateSubscription(
    deps,
    tx,
    a.subscriptionId,
    block,
    "status = 'PastDue', renewal_failure_code = $5, renewal_failure_message = $6",
    [failure.code, failure.message],
  );
  await recordLogEvent(deps.ctx, tx, "subscription.renewal_failed", {
    ...(await dataOf(at, a.subscriptionId, "PastDue")),
    amount: a.amount.toString(),
    code: failure.code,
    message: failure.message,
    reason: a.reason,
    ...where,
  });
}

async function subscriptionPaused(at: Applying, a: ArgsOf<"SubscriptionPaused">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  await updateSubscription(deps, tx, a.subscriptionId, block, "status = 'Paused', paused_remaining = $5", [
    a.remaining,
  ]);
  await recordLogEvent(deps.ctx, tx, "subscription.paused", {
    ...(await dataOf(at, a.subscriptionId, "Paused")),
    remaining: Number(a.remaining),
    ...where,
  });
}

async function subscriptionResumed(at: Applying, a: ArgsOf<"SubscriptionResumed">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  // Without a charge the period goes on unchanged (it kept running while paused: periodEnd is the
  // end it had, and period_start keeps the period's length ending there); with one, the
  // SubscriptionRenewed just before has already set the new period.
  await updateSubscription(
    deps,
    tx,
    a.subscriptionId,
    block,
    `status = 'Active', paused_remaining = 0,
     period_start = CASE WHEN $6 THEN period_start ELSE $5 - (current_period_end - period_start) END,
     current_period_end = $5`,
    [a.periodEnd, a.charged],
  );
  await recordLogEvent(deps.ctx, tx, "subscription.resumed", {
    ...(await dataOf(at, a.subscriptionId, "Active")),
    periodEnd: Number(a.periodEnd),
    charged: a.charged,
    ...where,
  });
}

async function subscriptionCancelled(at: Applying, a: ArgsOf<"SubscriptionCancelled">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  await updateSubscription(
    deps,
    tx,
    a.subscriptionId,
    block,
    "status = 'Cancelled', paused_remaining = 0",
    [],
  );
  await recordLogEvent(deps.ctx, tx, "subscription.cancelled", {
    ...(await dataOf(at, a.subscriptionId, "Cancelled")),
    by: getAddress(a.by),
    ...where,
  });
}

async function maxOverageSet({ deps, tx, block }: Applying, a: ArgsOf<"MaxOverageSet">) {
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  await updateSubscription(deps, tx, a.subscriptionId, block, "max_overage = $5", [a.maxOverage]);
}

async function allowanceDeducted(at: Applying, a: ArgsOf<"AllowanceDeducted">) {
  const { deps, tx, where, block } = at;
  await ensureSubscription(deps, tx, a.subscriptionId, block);
  await updateSubscription(deps, tx, a.subscriptionId, block, "overage_used = $5, max_overage = $6", [
    a.overageUsed,
    a.maxOverage,
  ]);
  await recordLogEvent(deps.ctx, tx, "allowance.deducted", {
    ...(await dataOf(at, a.subscriptionId, undefined)),
    ref: a.ref,
    ...(await usageRefOf(tx, a.ref)),
    amount: a.amount.toString(),
    overageUsed: a.overageUsed.toString(),
    maxOverage: a.maxOverage.toString(),
    ...where,
  });
}

async function deductionFailed(at: Applying, a: ArgsOf<"DeductionFailed">) {
  const { deps, tx, where, block } = at;
  // Only a cap reached is an event of the log; a deduction refused for a paused or cancelled
  // subscription, or a failed pull, shows on the usage record that asked for it.
  if (a.reason !== DeductionFailure.AllowanceExhausted) return;
  const sub = await ensureSubscription(deps, tx, a.subscriptionId, block);
  await recordLogEvent(deps.ctx, tx, "allowance.exhausted", {
    ...(await dataOf(at, a.subscriptionId, undefined)),
    ref: a.ref,
    ...(await usageRefOf(tx, a.ref)),
    amount: a.amount.toString(),
    overageUsed: sub.overage_used.toString(),
    maxOverage: sub.max_overage.toString(),
    ...where,
  });
}
