/**
 * The usage settler's worker loop: rounds run one at a time (a round, `runOnce` and `reconcile` share
 * one queue), and between rounds the loop sleeps until it is signalled, records held to fill a batch
 * have lingered, an unqueued batch may be released, or the idle backstop passes.
 *
 * State: whether it runs, whether a signal came during the round (`dirty`: go again at once), the
 * queue of serialized work and the pause the loop sleeps in.
 */
import type { Logger } from "pino";
import { isChainUnreachable } from "../../../../facilitator/chainErrors.ts";
import { createWakeablePause } from "../../../../facilitator/wakeablePause.ts";

export type UsageLoopDeps = {
  round(): Promise<{ held: boolean }>;
  lingerMs: number;
  pollIntervalMs: number;
  /** When an unqueued batch may be released, as of the last round, if any. */
  releaseDueInMs(): number | undefined;
  log: Logger;
};

export type UsageLoop = ReturnType<typeof createUsageLoop>;

export function createUsageLoop(deps: UsageLoopDeps) {
  const { log } = deps;
  let queue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  let dirty = false;
  const sleeper = createWakeablePause();

  /** Runs `fn` after everything queued before it, whether that succeeded or not. */
  function serialized<T>(fn: () => Promise<T>): Promise<T> {
    const next = queue.then(fn, fn);
    queue = next.catch(() => undefined);
    return next;
  }

  async function loop(): Promise<void> {
    let failing = false;
    while (running) {
      dirty = false;
      let held = false;
      try {
        held = (await serialized(deps.round)).held;
        failing = false;
      } catch (error) {
        if (!failing) {
          if (isChainUnreachable(error)) log.warn("chain unreachable; usage settlement waits");
          else log.error({ err: error }, "usage settlement failed; it will be retried");
        }
        failing = true;
      }
      if (!running) break;
      if (dirty && !held) continue;
      const releaseDueInMs = deps.releaseDueInMs();
      const idle =
        releaseDueInMs === undefined
          ? deps.pollIntervalMs
          : Math.min(deps.pollIntervalMs, releaseDueInMs + 100);
      await sleeper.pause(held ? deps.lingerMs : idle);
    }
  }

  return {
    serialized,
    /** Wakes the loop (new work arrived). */
    signal(): void {
      dirty = true;
      sleeper.wake();
    },
    /** Starts the loop once `attach` (listeners, the outbox) is done; a second start does nothing. */
    async start(attach: () => Promise<void>): Promise<void> {
      if (running) return;
      running = true;
      await attach();
      loopDone = loop();
    },
    /** Stops the loop, waits for its round and queued work, then runs `detach`. */
    async stop(detach: () => Promise<void>): Promise<void> {
      running = false;
      sleeper.wake();
      await loopDone;
      await queue;
      await detach();
    },
  };
}
