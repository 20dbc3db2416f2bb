/**
 * A fresh index's start: its cursor created from the indexer's `start`, after reading every plan and
 * subscription at the head into the tables when it starts from a snapshot (no events: nothing happened).
 */
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { blockHash } from "./indexCursor.ts";
import type { IndexerDeps } from "./indexerDeps.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  type PlanRow,
  upsertPlan,
  upsertSubscription,
} from "./subscriptionRecords.ts";

const READ_CONCURRENCY = 16;

/** Creates the cursor for a fresh index, from `start`. */
export async function initialiseIndex(
  deps: IndexerDeps,
  start: "genesis" | "snapshot" | bigint,
  head: bigint,
): Promise<void> {
  let cursor: bigint;
  if (start === "genesis") cursor = -1n;
  else if (typeof start === "bigint") cursor = start - 1n;
  else {
    await snapshot(deps, head);
    cursor = head;
  }
  await deps.ctx.store.query(
    `INSERT INTO chain_cursors (name, block_number, block_hash) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO NOTHING`,
    [deps.cursorName, cursor, await blockHash(deps, cursor)],
  );
}

/** Reads ids 1..count of `what` as of `block`, `READ_CONCURRENCY` at a time. */
async function readAll<T>(
  deps: IndexerDeps,
  block: bigint,
  what: "plans" | "subscriptions",
  count: bigint,
): Promise<[bigint, T][]> {
  const out: [bigint, T][] = [];
  for (let first = 1n; first <= count; first += BigInt(READ_CONCURRENCY)) {
    const ids: bigint[] = [];
    for (let id = first; id <= count && id < first + BigInt(READ_CONCURRENCY); id++) ids.push(id);
    const rows = await Promise.all(ids.map((id) => readAt<T>(deps, block, what, id)));
    for (const [i, row] of rows.entries()) out.push([ids[i]!, row]);
  }
  return out;
}

function readAt<T>(
  deps: IndexerDeps,
  block: bigint,
  functionName: "planCount" | "subscriptionCount" | "plans" | "subscriptions",
  id?: bigint,
): Promise<T> {
  return deps.client.readContract({
    address: deps.manager,
    abi: subscriptionManagerAbi,
    functionName,
    args: id === undefined ? undefined : [id],
    blockNumber: block,
  } as never) as Promise<T>;
}

/** Reads every plan and subscription as of `block` into the tables (no events: nothing happened). */
async function snapshot(deps: IndexerDeps, block: bigint): Promise<void> {
  const { scope } = deps;
  const planCount = await readAt<bigint>(deps, block, "planCount");
  const subscriptionCount = await readAt<bigint>(deps, block, "subscriptionCount");
  const plans = new Map<bigint, PlanRow>();
  for (const [id, plan] of await readAll<ChainPlan>(deps, block, "plans", planCount)) {
    plans.set(id, chainPlanToRow(id, plan));
  }
  const subs = await readAll<ChainSubscription>(deps, block, "subscriptions", subscriptionCount);
  await deps.ctx.store.transaction(async (tx) => {
    for (const plan of plans.values()) await upsertPlan(tx, scope, plan, null);
    for (const [subscriptionId, sub] of subs) {
      const plan = plans.get(sub.planId);
      if (plan === undefined) continue;
      await upsertSubscription(tx, scope, {
        subscriptionId,
        sub,
        provider: plan.provider,
        block,
        createdTx: null,
      });
    }
  });
  deps.log.info(
    { block, plans: plans.size, subscriptions: subs.length },
    "subscription index started from a snapshot",
  );
}
