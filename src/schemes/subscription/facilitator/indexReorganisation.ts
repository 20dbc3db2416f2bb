/**
 * Following a reorganisation: the chain replaced the cursor's block. The applied logs above
 * `cursor - REORG_DEPTH` that are not on the chain any more are forgotten, their events marked undone,
 * the plans and subscriptions they touched read again from the chain, and the cursor moved back, so
 * the sync that follows applies the new chain's logs. Chain reads first; the writes are one
 * transaction, a compare-and-set on the cursor.
 */
import type { Hex } from "viem";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import type { Queryable } from "../../../store/store.ts";
import { blockHash, blockHashOrNull, readCursor, setCursor } from "./indexCursor.ts";
import { type IndexerDeps, REORG_DEPTH } from "./indexerDeps.ts";
import { recordUndoing, type UndoableEvent } from "./indexLogEvents.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  findPlan,
  statusOf,
  upsertSubscription,
} from "./subscriptionRecords.ts";

type Orphan = { tx_hash: Hex; log_index: number };

/** See above. */
export async function followReorganisation(deps: IndexerDeps, cursor: bigint): Promise<void> {
  const back = cursor - REORG_DEPTH < -1n ? -1n : cursor - REORG_DEPTH;
  const orphans = await findOrphans(deps, cursor, back);
  const { touched, touchedPlans } = await touchedBy(deps, orphans);
  const freshPlans = new Map<bigint, ChainPlan>();
  for (const id of touchedPlans)
    freshPlans.set(BigInt(id), await readChain<ChainPlan>(deps, "plans", BigInt(id)));
  const fresh = new Map<bigint, ChainSubscription>();
  for (const id of touched) {
    fresh.set(BigInt(id), await readChain<ChainSubscription>(deps, "subscriptions", BigInt(id)));
  }
  const backHash = await blockHash(deps, back);
  const head = await deps.client.getBlockNumber({ cacheTime: 0 });
  const moved = await deps.ctx.store.transaction(async (tx) => {
    if ((await readCursor(deps, tx, true)) !== cursor) return false;
    await undoOrphans(deps, tx, orphans);
    await refreshPlans(deps, tx, freshPlans);
    await refreshSubscriptions(deps, tx, fresh, head);
    await setCursor(tx, deps, back, backHash);
    return true;
  });
  if (moved) {
    deps.log.warn(
      {
        cursor: deps.cursorName,
        from: cursor,
        to: back,
        undone: orphans.length,
        subscriptions: touched.size,
      },
      "a reorganisation replaced indexed blocks; the index follows the new chain",
    );
  }
}

/** The applied logs above `back` whose block is not the chain's any more. */
async function findOrphans(deps: IndexerDeps, cursor: bigint, back: bigint): Promise<Orphan[]> {
  const applied = await deps.ctx.store.query<{
    tx_hash: Hex;
    log_index: number;
    block_number: string;
    block_hash: string | null;
  }>(
    `SELECT tx_hash, log_index, block_number, block_hash FROM indexed_logs
     WHERE chain_id = $1 AND block_number > $2`,
    [deps.ctx.chainId, back],
  );
  const canonical = new Map<string, string | null>();
  const receipts = new Map<string, bigint | null>();
  const orphans: Orphan[] = [];
  for (const row of applied) {
    const number = BigInt(row.block_number);
    if (row.block_hash !== null) {
      if (!canonical.has(row.block_number)) {
        canonical.set(row.block_number, number > cursor + 1n ? null : await blockHashOrNull(deps, number));
      }
      if (canonical.get(row.block_number) !== row.block_hash) orphans.push(row);
      continue;
    }
    // Applied before block hashes were kept: its transaction's receipt says where it is now.
    if (!receipts.has(row.tx_hash)) receipts.set(row.tx_hash, await minedIn(deps, row.tx_hash));
    if (receipts.get(row.tx_hash) !== number) orphans.push(row);
  }
  return orphans;
}

/** The subscriptions (and plans, for plan events) whose events the orphans recorded. */
async function touchedBy(deps: IndexerDeps, orphans: readonly Orphan[]) {
  const touched = new Set<string>();
  const touchedPlans = new Set<string>();
  for (const orphan of orphans) {
    const events = await deps.ctx.store.query<{ subscription_id: string | null; plan_id: string | null }>(
      `SELECT data ->> 'subscriptionId' AS subscription_id, data ->> 'planId' AS plan_id FROM events
       WHERE data ? 'logIndex' AND data ->> 'transaction' = $1 AND data ->> 'logIndex' = $2
         AND undone_at IS NULL`,
      [orphan.tx_hash, String(orphan.log_index)],
    );
    for (const event of events) {
      if (event.subscription_id !== null) touched.add(event.subscription_id);
      else if (event.plan_id !== null) touchedPlans.add(event.plan_id);
    }
  }
  return { touched, touchedPlans };
}

async function readChain<T>(
  deps: IndexerDeps,
  functionName: "plans" | "subscriptions",
  id: bigint,
): Promise<T> {
  return (await deps.client.readContract({
    address: deps.manager,
    abi: subscriptionManagerAbi,
    functionName,
    args: [id],
  })) as T;
}

/** Forgets the orphaned logs and marks their events undone, telling their providers. */
async function undoOrphans(deps: IndexerDeps, tx: Queryable, orphans: readonly Orphan[]): Promise<void> {
  for (const orphan of orphans) {
    await tx.query("DELETE FROM indexed_logs WHERE chain_id = $1 AND tx_hash = $2 AND log_index = $3", [
      deps.ctx.chainId,
      orphan.tx_hash,
      orphan.log_index,
    ]);
    const undone = await tx.query<UndoableEvent>(
      `UPDATE events SET undone_at = now()
       WHERE data ? 'logIndex' AND data ->> 'transaction' = $1 AND data ->> 'logIndex' = $2
       AND undone_at IS NULL RETURNING id, type, data`,
      [orphan.tx_hash, String(orphan.log_index)],
    );
    for (const event of undone) await recordUndoing(deps.ctx, tx, "event.undone", event);
  }
}

async function refreshPlans(
  deps: IndexerDeps,
  tx: Queryable,
  freshPlans: Map<bigint, ChainPlan>,
): Promise<void> {
  const { ctx, manager } = deps;
  for (const [planId, plan] of freshPlans) {
    // A plan created in an undone block: the chain's plan of that id now, if any.
    const row = chainPlanToRow(planId, plan);
    if (BigInt(row.provider) === 0n) {
      await tx.query("DELETE FROM plans WHERE chain_id = $1 AND manager = $2 AND plan_id = $3", [
        ctx.chainId,
        manager.toLowerCase(),
        planId,
      ]);
      continue;
    }
    await tx.query(
      `UPDATE plans SET provider = $4, token = $5, amount = $6, interval_seconds = $7, included_units = $8,
         overage_unit_price = $9, deprecated = $10, successor_plan_id = $11, updated_at = now()
       WHERE chain_id = $1 AND manager = $2 AND plan_id = $3`,
      [
        ctx.chainId,
        manager.toLowerCase(),
        planId,
        row.provider,
        row.token,
        row.amount,
        row.interval_seconds,
        row.included_units,
        row.overage_unit_price,
        row.deprecated,
        row.successor_plan_id,
      ],
    );
  }
}

async function refreshSubscriptions(
  deps: IndexerDeps,
  tx: Queryable,
  fresh: Map<bigint, ChainSubscription>,
  head: bigint,
): Promise<void> {
  const { ctx, manager, scope } = deps;
  for (const [subscriptionId, sub] of fresh) {
    if (statusOf(sub.status) === undefined) {
      await tx.query(
        "DELETE FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3",
        [ctx.chainId, manager.toLowerCase(), subscriptionId],
      );
      continue;
    }
    const plan = await findPlan(tx, scope, sub.planId);
    if (plan === undefined) continue;
    await upsertSubscription(tx, scope, {
      subscriptionId,
      sub,
      provider: plan.provider,
      block: head,
      createdTx: null,
    });
  }
}

/** The block number the transaction is mined in now, or `null`. */
async function minedIn(deps: IndexerDeps, hash: Hex): Promise<bigint | null> {
  try {
    return (await deps.client.getTransactionReceipt({ hash })).blockNumber;
  } catch (error) {
    if (error instanceof Error && error.name === "TransactionReceiptNotFoundError") return null;
    throw error;
  }
}
