/**
 * One round of the usage settler: drive open batches to their outcome (usageReconciler.ts), then claim,
 * check and send batches until none is due, waiting for each one's outcome, and ask the subscription
 * indexer to catch up when anything changed (it writes the `allowance.*` events from the same logs).
 */
import type { Logger } from "pino";
import type { TokenPauseWatch } from "../../../../facilitator/tokenPauseWatch.ts";
import type { SubscriptionIndexer } from "../subscriptionIndexer.ts";
import type { SentUsageBatch } from "./sendUsageBatch.ts";
import type { claimUsageBatch } from "./usageBatchRecords.ts";
import { addRun, type UsageReconciler, type UsageRunResult } from "./usageReconciler.ts";
import type { UsageBatchRow, UsageRow } from "./usageRecords.ts";

export type UsageRoundDeps = {
  reconciler: Pick<UsageReconciler, "reconcile" | "outcomeOf">;
  /** Claims the next batch (usageBatchRecords.ts `claimUsageBatch` with the settler's rule). */
  claim(force: boolean): ReturnType<typeof claimUsageBatch>;
  send(batch: UsageBatchRow, claimed: UsageRow[]): Promise<SentUsageBatch>;
  tokenPause?: Pick<TokenPauseWatch, "heldTokens"> | undefined;
  indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
  log: Logger;
};

/** A round's counts, and whether records were held back to fill a batch (`held`: look again after `lingerMs`). */
export type UsageRound = UsageRunResult & { held: boolean };

export function createUsageRound(deps: UsageRoundDeps): (force: boolean) => Promise<UsageRound> {
  return async function round(force) {
    const total = { ...(await deps.reconciler.reconcile()), held: false };
    let changed = total.batches > 0;
    // A served token paused by its issuer: every pull in it would fail its record, so no record is
    // claimed until the unpause wakes the loop (records are not sorted by token before they are claimed).
    const paused = (deps.tokenPause?.heldTokens().length ?? 0) > 0;
    for (; !paused; ) {
      const claimed = await deps.claim(force);
      if (claimed === undefined) break;
      if (claimed === "held") {
        total.held = true;
        break;
      }
      const sent = await deps.send(claimed.batch, claimed.rows);
      total.failed += sent.failed;
      if (sent.outboxId !== undefined)
        addRun(total, await deps.reconciler.outcomeOf(claimed.batch.id, sent.outboxId));
      changed = true;
    }
    if (changed) {
      await deps.indexer?.syncOnce().catch((error: unknown) => {
        deps.log.warn({ err: error }, "index sync after usage settlement failed; the indexer will retry");
      });
    }
    return total;
  };
}
