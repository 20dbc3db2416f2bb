/**
 * The pause between rounds of a facilitator worker loop (settlement, renewals, usage, indexing,
 * webhooks): a timer that new work can cut short.
 *
 * Invariant: `wake()` ends the pause in progress, if any, and is a no-op otherwise; the loop looks for
 * work after every pause, so work that arrives while no pause runs is found on the next round anyway.
 */
/**
 * How long a worker with nothing to do sleeps before it looks anyway. Work wakes it at once (store
 * notifications, in-process signals, chain pushes); this read is the backstop for a lost notification
 * and for work with no notification (a row left by a crashed instance, a retry coming due).
 */
export const IDLE_BACKSTOP_MS = 30_000;

export type WakeablePause = {
  /** Resolves after `ms` (with `false`), or as soon as `wake()` is called (with `true`). */
  pause(ms: number): Promise<boolean>;
  wake(): void;
};

export function createWakeablePause(): WakeablePause {
  let wake: (() => void) | undefined;
  return {
    pause(ms) {
      return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => done(false), ms);
        function done(woken: boolean) {
          clearTimeout(timer);
          wake = undefined;
          resolve(woken);
        }
        wake = () => done(true);
      });
    },
    wake() {
      wake?.();
    },
  };
}
