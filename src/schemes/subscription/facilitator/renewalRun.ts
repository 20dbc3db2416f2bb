/**
 * One renewal run (renewalKeeper.ts): under the lease, with the index brought up to the chain, every
 * subscription due by the chain's time collected in batches, ids with a renewal on its way left out.
 */
import type { Logger } from "pino";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { collectBatch, type RenewalCollectorDeps } from "./renewalCollector.ts";
import type { KeeperRun } from "./renewalKeeperTypes.ts";
import type { RenewalLease } from "./renewalLease.ts";
import { renewalsOnTheirWay } from "./renewalOutbox.ts";
import { dueRenewals } from "./renewalRecords.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexer.ts";

export type RenewalRunDeps = RenewalCollectorDeps & {
  ctx: Pick<FacilitatorContext, "store" | "publicClient" | "gas" | "chainId" | "tokenPause">;
  lease: RenewalLease;
  indexer: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
  log: Logger;
  knownTokens: readonly string[];
  maxAttempts: number;
  batchSize: number;
  waitForLeaseMs: number;
};

/** Runs once the lease is taken; an empty run when another instance holds it past `waitForLeaseMs`. */
export async function runRenewals(deps: RenewalRunDeps): Promise<KeeperRun> {
  const result: KeeperRun = {
    chainTime: 0,
    attempted: [],
    renewed: [],
    failed: [],
    isolated: [],
    transactions: [],
  };
  // Wait out a run another instance (or this one's loop) is making, rather than skipping. A lease
  // whose holder died expires `leaseMs` after its last renewal and is taken then.
  for (let waited = 0; !(await deps.lease.take()); waited += 200) {
    if (waited > deps.waitForLeaseMs) return result;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  // Renewed while the run lasts (a run waits for receipts, which may take longer than the lease).
  // Should a renewal find the lease taken (this process stalled past its expiry), the run stops
  // before its next batch; a batch another instance also sends is harmless: `collectMany` skips a
  // subscription that is no longer due, and ids with a renewal on its way are left out.
  const heartbeat = deps.lease.keepAlive(() =>
    deps.log.warn("renewal lease taken by another instance; this run stops after its batch"),
  );
  try {
    await collectDue(deps, result, heartbeat.lost);
    return result;
  } finally {
    heartbeat.stop();
    await deps.lease.release().catch(() => undefined);
  }
}

/** The run under the lease: batches of due subscriptions until none is left or the lease is lost. */
async function collectDue(deps: RenewalRunDeps, result: KeeperRun, lost: () => boolean): Promise<void> {
  const { ctx } = deps;
  await deps.indexer?.syncOnce();
  const block = await ctx.publicClient.getBlock({ blockTag: "latest" });
  result.chainTime = Number(block.timestamp);
  const tried: bigint[] = await renewalsOnTheirWay(ctx.store, ctx);
  while (!lost()) {
    const due = await dueRenewals(ctx.store, deps.scope, {
      chainTime: result.chainTime,
      exclude: tried,
      maxAttempts: deps.maxAttempts,
      batchSize: deps.batchSize,
      tokens: deps.knownTokens.filter((token) => ctx.tokenPause?.isPaused(token) !== true),
    });
    if (due.length === 0) break;
    tried.push(...due.map((row) => row.subscription_id));
    await collectBatch(deps, result.chainTime, due, result);
  }
  if (result.attempted.length > 0) await deps.indexer?.syncOnce();
}
