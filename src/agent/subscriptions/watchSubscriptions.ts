/**
 * The loop that keeps an agent's ledger in step with its subscriptions on chain: `keeper.sync()` every
 * `intervalMs`. It must look more often than the shortest plan interval the agent holds, so that a
 * renewal the budget cannot hold is paused before it comes due (docs/budgets.md, "Watching").
 * A failed look is logged and retried at the next tick; `stop()` waits for a look in progress.
 */
import type { SubscriptionKeeper, SyncedSubscription } from "./createSubscriptionKeeper.ts";

export type WatchSubscriptionsOptions = {
  keeper: Pick<SubscriptionKeeper, "sync">;
  /** Between looks (default 60 s). */
  intervalMs?: number | undefined;
  /** Waits between looks; resolves early when `signal` aborts. Default: a timer. */
  wait?: ((ms: number, signal: AbortSignal) => Promise<void>) | undefined;
  logger?: { warn(obj: object, msg: string): void } | undefined;
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
  const wait = options.wait ?? timer;
  const controller = new AbortController();
  const loop = (async () => {
    while (!controller.signal.aborted) {
      try {
        options.onSync?.(await options.keeper.sync());
      } catch (error) {
        options.logger?.warn({ err: error }, "subscription watcher: look failed");
      }
      if (controller.signal.aborted) break;
      await wait(intervalMs, controller.signal);
    }
  })();
  return {
    async stop() {
      controller.abort();
      await loop;
    },
  };
}
