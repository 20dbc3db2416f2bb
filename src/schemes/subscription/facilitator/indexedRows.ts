/**
 * The index's rows as an event needs them: a plan or subscription the index started too late to see
 * created is read from the chain first; a subscription's row updated; the data every subscription
 * event carries; a deduction's usage reference.
 */
import { getAddress, type Hex } from "viem";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Queryable } from "../../../store/store.ts";
import type { IndexerDeps } from "./indexerDeps.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  findPlan,
  findSubscription,
  type PlanRow,
  type SubscriptionRow,
  upsertPlan,
  upsertSubscription,
} from "./subscriptionRecords.ts";

/** The plan's row, read from the chain into the index when missing. */
export async function ensurePlan(deps: IndexerDeps, tx: Queryable, planId: bigint): Promise<PlanRow> {
  const { client, manager, scope } = deps;
  const row = await findPlan(tx, scope, planId);
  if (row !== undefined) return row;
  // Only when the index started after the plan was created (a snapshot races a log, or `start` was a
  // later block): provider, token and prices never change, so the current state is good enough.
  const plan = (await client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "plans",
    args: [planId],
  })) as ChainPlan;
  const fresh = chainPlanToRow(planId, plan);
  await upsertPlan(tx, scope, fresh, null);
  return fresh;
}

/** The subscription's row, read from the chain into the index when missing. */
export async function ensureSubscription(
  deps: IndexerDeps,
  tx: Queryable,
  subscriptionId: bigint,
  block: bigint,
): Promise<SubscriptionRow> {
  const { client, manager, scope } = deps;
  const row = await findSubscription(tx, scope, subscriptionId);
  if (row !== undefined) return row;
  const sub = (await client.readContract({
    address: manager,
    abi: subscriptionManagerAbi,
    functionName: "subscriptions",
    args: [subscriptionId],
  })) as ChainSubscription;
  const plan = await ensurePlan(deps, tx, sub.planId);
  await upsertSubscription(tx, scope, {
    subscriptionId,
    sub,
    provider: plan.provider,
    block,
    createdTx: null,
  });
  const created = await findSubscription(tx, scope, subscriptionId);
  if (created === undefined) {
    throw new TollgateError("Internal", `subscription ${subscriptionId} is in a log but not on chain`);
  }
  return created;
}

export async function updateSubscription(
  deps: IndexerDeps,
  tx: Queryable,
  subscriptionId: bigint,
  block: bigint,
  set: string,
  params: readonly (bigint | string | number | boolean)[],
): Promise<void> {
  await tx.query(
    `UPDATE subscriptions SET ${set}, last_block = $4, updated_at = now()
     WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3`,
    [deps.ctx.chainId, deps.manager.toLowerCase(), subscriptionId, block, ...params],
  );
}

/** What every subscription event carries: the subscription, its plan, subscriber, provider and token. */
export async function subscriptionData(
  deps: IndexerDeps,
  tx: Queryable,
  subscriptionId: bigint,
  block: bigint,
  status: string | undefined,
) {
  const sub = await ensureSubscription(deps, tx, subscriptionId, block);
  const plan = await ensurePlan(deps, tx, sub.plan_id);
  const provider = getAddress(plan.provider);
  return {
    subscriptionId: subscriptionId.toString(),
    planId: sub.plan_id.toString(),
    subscriber: getAddress(sub.subscriber),
    provider,
    payTo: provider,
    token: getAddress(plan.token),
    ...(status === undefined ? {} : { status }),
  };
}

/** The provider's own reference of a deduction the usage worker sent (docs/subscriptions.md). */
export async function usageRefOf(tx: Queryable, chainRef: Hex): Promise<{ usageRef?: string }> {
  const rows = await tx.query<{ ref: string }>("SELECT ref FROM usage_records WHERE chain_ref = $1 LIMIT 1", [
    chainRef.toLowerCase(),
  ]);
  const ref = rows[0]?.ref;
  return ref === undefined ? {} : { usageRef: ref };
}
