/**
 * Collects a batch of due subscriptions in one `collectMany`, or, when that would revert as a whole
 * (a hostile token on a manager deployed before per-item isolation, a call that needs absurd gas),
 * each half on its own, down to single items: an item that reverts alone is set aside with the
 * back-off of a failed pull, the rest are collected. A batch of n items with k poisoned ones costs
 * O(k log n) estimates and no reverted transaction.
 */
import type { Logger } from "pino";
import { estimateCollectMany } from "../../../chain/actions/subscriptions/estimateCollectMany.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import type { Outbox } from "../../../facilitator/outbox/outboxTypes.ts";
import { isChainRefusal } from "./chainRefusal.ts";
import type { KeeperRun } from "./renewalKeeperTypes.ts";
import { renewalOutcomes, sendCollect } from "./renewalOutbox.ts";
import { type DueRow, type RenewalScope, recordAttempts } from "./renewalRecords.ts";

/**
 * Gas a batch may need per item before it is treated as poisoned and split. The contract gives each
 * token call 100 000 gas (PULL_GAS) and an honest renewal costs about 50 000 in all; an estimate far
 * above that means an item is burning gas (on a manager without the cap) and would push the batch
 * toward the block's limit.
 */
const MAX_GAS_PER_ITEM = 250_000n;
const BATCH_GAS_OVERHEAD = 100_000n;

export type RenewalCollectorDeps = {
  ctx: Pick<FacilitatorContext, "store" | "publicClient" | "gas">;
  outbox: Outbox;
  scope: RenewalScope;
  retryAfter: number;
  log: Logger;
};

/**
 * Whether `collectMany(ids)` would go through as one transaction at a sane cost. A refusal (a revert,
 * out of gas at the block's limit) is an answer; any other error (the chain cannot be asked) throws.
 */
async function collectable(deps: RenewalCollectorDeps, ids: readonly bigint[]): Promise<bigint | undefined> {
  try {
    const gas = await estimateCollectMany(deps.ctx.publicClient, {
      manager: deps.scope.manager,
      account: deps.ctx.gas.address,
      subscriptionIds: ids,
    });
    return gas <= BigInt(ids.length) * MAX_GAS_PER_ITEM + BATCH_GAS_OVERHEAD ? gas : undefined;
  } catch (error) {
    if (isChainRefusal(error)) return undefined;
    throw error;
  }
}

/** Collects `rows` (see above), adding what happened to `result`. */
export async function collectBatch(
  deps: RenewalCollectorDeps,
  chainTime: number,
  rows: readonly DueRow[],
  result: KeeperRun,
): Promise<void> {
  const { log } = deps;
  const ids = rows.map((row) => row.subscription_id);
  const gas = await collectable(deps, ids);
  // Reverted or dropped although the estimate passed (state moved, or a token that behaves differently
  // when estimated): split like a batch that would revert.
  const sent =
    gas === undefined
      ? undefined
      : await sendCollect(
          deps.outbox,
          { store: deps.ctx.store, scope: deps.scope, log },
          chainTime,
          rows,
          gas,
        );
  if (sent === undefined) {
    if (rows.length === 1) {
      const id = ids[0]!.toString();
      await recordAttempts(
        deps.ctx.store,
        deps.scope,
        chainTime + deps.retryAfter,
        rows,
        new Set(),
        new Set([id]),
      );
      result.isolated.push(id);
      log.warn({ subscriptionId: id }, "collecting this subscription reverts; set aside until its retry");
      return;
    }
    const half = Math.ceil(rows.length / 2);
    await collectBatch(deps, chainTime, rows.slice(0, half), result);
    await collectBatch(deps, chainTime, rows.slice(half), result);
    return;
  }
  result.transactions.push(sent.hash);
  result.attempted.push(...ids.map(String));
  // The outbox handler recorded the attempts; the run reports them.
  const outcome = renewalOutcomes(sent.logs, deps.scope.manager);
  result.renewed.push(...outcome.renewed);
  result.failed.push(...outcome.failed);
  log.info(
    {
      transaction: sent.hash,
      attempted: ids.length,
      renewed: outcome.renewed.size,
      failed: outcome.failed.size,
    },
    "renewals collected",
  );
}
