/**
 * The loop that keeps an agent's ledger in step with its subscriptions on chain: `keeper.sync()` every
 * `intervalMs`. It must look more often than the shortest plan interval the agent holds, so that a
 * renewal the budget cannot hold is paused before it comes due (docs/budgets.md, "Watching").
 * A failed look is logged and retried at the next tick; `stop()` waits for a look in progress.
 *
 * Given the agent's demand history (`policy`), each look also runs the policy's cancel check
 * (`cancelUnneededSubscriptions`) through the keeper, so a subscription the learned demand no longer
 * justifies is cancelled before it renews, and its hold ended, by a long-running agent too, not only
 * at the end of a `tollgate run`. It runs after the sync, so it judges what the ledger has recorded.
 * A look never waits past the opening of the next cancel window it saw (`reviewInSeconds`, chain
 * time): with a plan shorter than `intervalMs`, or a window that opens between two ticks, the check
 * still runs inside the window, before that renewal comes due.
 */
import type { Address } from "viem";
import {
  type CancelClaims,
  cancelUnneededSubscriptions,
  type SubscriptionCancelOutcome,
} from "../../../agent/policy/cancelUnneededSubscriptions.ts";
import type { DemandHistory } from "../../../agent/policy/createDemandHistory.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { SubscriptionKeeper, SyncedSubscription } from "./createSubscriptionKeeper.ts";
import { facilitatorSubscriptions } from "./heldSubscriptions.ts";

/** What the watcher needs to run the policy's cancel check each look. */
export type WatchPolicy = {
  agent: string;
  payer: {
    address: Address;
    facilitator: FacilitatorClient;
    cancel(subscriptionId: string): Promise<unknown>;
  };
  demand: DemandHistory;
  /** Where cancels are claimed (`createCancelClaims({ store, clock })`), so two processes send one. */
  claims: CancelClaims;
  clock: Clock;
  /** How long before a renewal a subscription is judged (see reviewSubscription). */
  leadSeconds?: number | undefined;
};

export type WatchSubscriptionsOptions = {
  keeper: Pick<SubscriptionKeeper, "sync"> & Partial<Pick<SubscriptionKeeper, "cancel">>;
  /** Runs the policy's cancel check after each sync (needs `keeper.cancel`). */
  policy?: WatchPolicy | undefined;
  /** Told the cancel check's outcomes after each look that ran it. */
  onCancelCheck?: ((outcomes: SubscriptionCancelOutcome[]) => void) | undefined;
  /** Between looks (default 60 s); shorter when a cancel window opens sooner. */
  intervalMs?: number | undefined;
  /** Waits between looks; resolves early when `signal` aborts. Default: a timer. */
  wait?: ((ms: number, signal: AbortSignal) => Promise<void>) | undefined;
  logger?: { info?(obj: object, msg: string): void; warn(obj: object, msg: string): void } | undefined;
  onSync?: ((synced: SyncedSubscription[]) => void) | undefined;
};

export type SubscriptionWatcher = { stop(): Promise<void> };

function timer(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const id = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(id);
        resolve();
      },
      { once: true },
    );
  });
}

/** Starts watching at once (the first look reconciles whatever happened while the agent was not running). */
export function watchSubscriptions(options: WatchSubscriptionsOptions): SubscriptionWatcher {
  const intervalMs = options.intervalMs ?? 60_000;
  const { policy, keeper } = options;
  const cancel = keeper.cancel;
  if (policy !== undefined && cancel === undefined) {
    throw new TypeError("watchSubscriptions: the policy's cancel check needs a keeper with cancel()");
  }
  const logger = options.logger;
  /** Until the next cancel window the last check saw opens: when the next look must come at the latest. */
  let untilWindowMs = Number.POSITIVE_INFINITY;
  const checkPolicy = async () => {
    untilWindowMs = Number.POSITIVE_INFINITY;
    if (policy === undefined || cancel === undefined) return;
    const outcomes = await cancelUnneededSubscriptions({
      agent: policy.agent,
      subscriber: policy.payer.address,
      source: facilitatorSubscriptions(policy.payer, { keeper: { cancel: (id, why) => cancel(id, why) } }),
      demand: policy.demand,
      claims: policy.claims,
      clock: policy.clock,
      leadSeconds: policy.leadSeconds,
      logger:
        logger === undefined
          ? undefined
          : { info: (o, m) => logger.info?.(o, m), warn: (o, m) => logger.warn(o, m) },
    });
    for (const o of outcomes) {
      // A second past the opening, so the look lands inside the window (chain seconds are whole).
      if (o.reviewInSeconds !== undefined)
        untilWindowMs = Math.min(untilWindowMs, (o.reviewInSeconds + 1) * 1000);
    }
    options.onCancelCheck?.(outcomes);
  };
  const wait = options.wait ?? timer;
  const controller = new AbortController();
  const loop = (async () => {
    while (!controller.signal.aborted) {
      try {
        options.onSync?.(await keeper.sync());
      } catch (error) {
        options.logger?.warn({ err: error }, "subscription watcher: look failed");
      }
      try {
        await checkPolicy();
      } catch (error) {
        options.logger?.warn({ err: error }, "subscription watcher: cancel check failed");
      }
      if (controller.signal.aborted) break;
      await wait(Math.min(intervalMs, untilWindowMs), controller.signal);
    }
  })();
  return {
    async stop() {
      controller.abort();
      await loop;
    },
  };
}
