/**
 * Settles recorded usage on chain in batches with `SubscriptionManager.deductAllowanceMany`, one
 * transaction for many records, each with its own outcome (docs/facilitator.md; docs/gate.md).
 *
 * Invariants (the settlement engine's, applied to deductions):
 * 1. A record is stored `pending` by `POST /usage` before anything is sent.
 * 2. Records are claimed into a batch (`submitted`) with `FOR UPDATE SKIP LOCKED`; once checked, the
 *    batch's `deductAllowanceMany` call is queued in the transaction outbox (kind `usage`) in the store
 *    transaction that marks the batch submitted. The outbox signs and records it before it is
 *    broadcast; after a crash it is looked up or broadcast again, never re-signed with other contents.
 * 3. Outcomes are recorded by the outbox handler of kind `usage`, in the store transaction that closes
 *    the outbox row (so exactly once), and come only from a receipt's per-item events (AllowanceDeducted / DeductionFailed, matched
 *    by each record's unique bytes32 ref) or, when the recorded transaction lost its nonce to another,
 *    from the chain's AllowanceDeducted logs for each ref. A record whose deduction is not on chain
 *    goes back to the queue, so no path deducts twice or loses a deduction. Beneath all of it the
 *    contract deducts a provider's ref at most once: an item sent again fails `RefUsed`, which is
 *    recorded as settled (by the earlier deduction's transaction), never as failed.
 *
 * 4. A claimed batch is queued or released, never both: queueing and releasing are each a compare-and-set
 *    on the batch's `pending` status (the batch row is locked), and only a batch no worker has touched
 *    for `abandonedAfterMs` is released. Instances sharing a gas key see each other's batches; a batch
 *    another live instance is still checking (operator, token, gas estimate) was once released and its
 *    records claimed again, while the first instance went on to queue it: each deduction landed twice.
 *    Records are failed while checking only as long as they still belong to the batch.
 *
 * 5. One record cannot hold back the others. A record on a plan whose token the facilitator does not
 *    serve fails alone before anything is sent (anyone may create a plan in any token), and a batch
 *    that would revert as a whole is split in halves until the records that revert on their own are
 *    found: those fail with the decoded reason, the rest are sent. If every record reverts alone the
 *    cause is likely shared (an operator revoked a moment ago), so they go back to the queue instead,
 *    a bounded number of times.
 *
 * The `allowance.deducted` / `allowance.exhausted` events are written by the subscription indexer from
 * the same logs (so deductions made by providers themselves appear too); this worker asks the indexer
 * to catch up after each batch.
 */

/*
 * Parts: usageBatchRecords.ts (the store's statements: claiming, queueing, releasing, outcomes),
 * usageBatchChecks.ts and sendUsageBatch.ts (checking a claimed batch and queueing it),
 * usageBatchOutcome.ts (the outbox handler), reopenUsageBatch.ts (the reorganisation hook),
 * usageReconciler.ts (open batches after a crash), usageRound.ts (one round) and usageLoop.ts (the
 * worker loop); this file composes them.
 */
import type { Logger } from "pino";
import type { FacilitatorContext } from "../../../../facilitator/facilitatorContext.ts";
import type { OutboxFaults } from "../../../../facilitator/outbox/createOutbox.ts";
import { outboxFor } from "../../../../facilitator/outbox/outboxFor.ts";
import type { Outbox } from "../../../../facilitator/outbox/outboxTypes.ts";
import { IDLE_BACKSTOP_MS } from "../../../../facilitator/wakeablePause.ts";
import type { SubscriptionIndexer } from "../subscriptionIndexer.ts";
import { createReopenUsageBatch } from "./reopenUsageBatch.ts";
import { createUsageBatchSender } from "./sendUsageBatch.ts";
import { createUsageBatchChecks } from "./usageBatchChecks.ts";
import { createUsageOutcomeHandler } from "./usageBatchOutcome.ts";
import { claimUsageBatch, USAGE_KIND, type UsageBatchScope } from "./usageBatchRecords.ts";
import { createUsageLoop } from "./usageLoop.ts";
import { createUsageReconciler, type UsageRunResult } from "./usageReconciler.ts";
import { createUsageRound } from "./usageRound.ts";

export { USAGE_KIND } from "./usageBatchRecords.ts";
export type { UsageRunResult } from "./usageReconciler.ts";

export type UsageSettlerOptions = {
  /** Records per transaction (default 100). */
  maxBatchSize?: number | undefined;
  /** How long the oldest pending record may wait for others to fill its batch (default 500 ms). */
  lingerMs?: number | undefined;
  /**
   * How long the loop sleeps with nothing to do before it looks anyway (default 30 s): usage recorded
   * here or in another instance wakes it at once (the store's `usage` notification).
   */
  pollIntervalMs?: number | undefined;
  /**
   * How long a claimed batch may sit unqueued before a settler releases its records (default 30 s): one
   * claimed by an instance that died before queueing it. A live instance whose batch was released
   * meanwhile does not queue it (the compare-and-set on its status fails).
   */
  abandonedAfterMs?: number | undefined;
  confirmations?: number | undefined;
  /** Test seams for crash tests, called at the named points of a batch's life. */
  faults?:
    | {
        afterRecord?: ((batchId: number) => void | Promise<void>) | undefined;
        afterBroadcast?: ((batchId: number) => void | Promise<void>) | undefined;
      }
    | undefined;
};

export type UsageSettler = {
  /** Wakes the loop (new records arrived). */
  signal(): void;
  /** Settles every pending record now, without lingering; resolves when all batches are recorded. */
  runOnce(): Promise<UsageRunResult>;
  /** Drives open batches left by a crash to their outcome. */
  reconcile(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

type SettlerContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens" | "tokenPause"
> &
  Partial<Pick<FacilitatorContext, "logsRange">>;

export function createUsageSettler(
  ctx: SettlerContext & Partial<Pick<FacilitatorContext, "outbox" | "clock">>,
  options: UsageSettlerOptions & {
    indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    outbox?: Outbox | undefined;
  } = {},
): UsageSettler {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the usage settler needs a SubscriptionManager address");
  }
  const manager = ctx.subscriptionManager;
  const { store, publicClient: client, gas } = ctx;
  const scope: UsageBatchScope = {
    chainId: ctx.chainId,
    manager: manager.toLowerCase(),
    sender: gas.address.toLowerCase(),
  };
  const maxBatchSize = options.maxBatchSize ?? 100;
  const lingerMs = options.lingerMs ?? 500;
  const log: Logger = ctx.logger.child({ component: "usage-settler" });
  const outbox =
    options.outbox ??
    outboxFor(ctx, { faults: usageFaults(options.faults), confirmations: options.confirmations });

  const checks = createUsageBatchChecks({
    store,
    client,
    chainId: ctx.chainId,
    manager,
    operator: gas.address,
    knownTokens: new Set(ctx.tokens.map((token) => token.address.toLowerCase())),
    log,
  });
  const sender = createUsageBatchSender({ store, outbox, checks, log });
  outbox.handle(
    USAGE_KIND,
    createUsageOutcomeHandler({ store, client, manager, logsRange: ctx.logsRange, log }),
  );
  outbox.onReorg(USAGE_KIND, createReopenUsageBatch(log));
  const reconciler = createUsageReconciler({
    store,
    outbox,
    scope,
    sender: gas.address,
    abandonedAfterMs: options.abandonedAfterMs ?? 30_000,
  });
  const round = createUsageRound({
    reconciler,
    claim: (force) => claimUsageBatch(store, scope, { force, maxBatchSize, lingerMs }),
    send: sender.send,
    tokenPause: ctx.tokenPause,
    indexer: options.indexer,
    log,
  });
  const loop = createUsageLoop({
    round: () => round(false),
    lingerMs,
    // Usage recorded here or in another instance wakes the loop (the store's `usage` notification).
    pollIntervalMs: options.pollIntervalMs ?? IDLE_BACKSTOP_MS,
    releaseDueInMs: reconciler.releaseDueInMs,
    log,
  });
  const wakeUps = createUsageWakeUps(ctx, outbox, loop.signal);

  return {
    signal: loop.signal,
    async runOnce() {
      const { held: _held, ...result } = await loop.serialized(() => round(true));
      return result;
    },
    async reconcile() {
      await loop.serialized(reconciler.reconcile);
    },
    start: () => loop.start(wakeUps.attach),
    stop: () => loop.stop(wakeUps.detach),
  };
}

/**
 * What wakes a running settler — usage recorded here or in another instance (the store's `usage`
 * notification), a token's unpause — and the outbox it made for itself, if any: attached on start,
 * detached on stop.
 */
function createUsageWakeUps(
  ctx: Pick<SettlerContext, "store" | "tokenPause"> & Partial<Pick<FacilitatorContext, "outbox">>,
  outbox: Outbox,
  signal: () => void,
) {
  const ownOutbox = outbox !== ctx.outbox;
  let unlisten: (() => Promise<void>) | undefined;
  let stopResume: (() => void) | undefined;
  return {
    async attach(): Promise<void> {
      if (ownOutbox) await outbox.start();
      unlisten = await ctx.store.listen("usage", () => signal());
      stopResume = ctx.tokenPause?.onResume(() => signal());
    },
    async detach(): Promise<void> {
      await unlisten?.();
      unlisten = undefined;
      stopResume?.();
      if (ownOutbox) await outbox.stop();
    },
  };
}

/** The settler's crash-test faults as the outbox's, for rows of kind `usage`. */
function usageFaults(faults: UsageSettlerOptions["faults"]): OutboxFaults | undefined {
  if (faults === undefined) return undefined;
  return {
    afterSign: async (row) => {
      if (row.kind === USAGE_KIND) await faults.afterRecord?.(Number(row.owner));
    },
    afterBroadcast: async (row) => {
      if (row.kind === USAGE_KIND) await faults.afterBroadcast?.(Number(row.owner));
    },
  };
}
