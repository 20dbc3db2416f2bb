import { describe, expect, it } from "vitest";
import type { SyncedSubscription } from "./createSubscriptionKeeper.ts";
import { watchSubscriptions } from "./watchSubscriptions.ts";

describe("watchSubscriptions", () => {
  it("looks at once, again after each wait, keeps going after a failed look, and stops", async () => {
    let looks = 0;
    const seen: SyncedSubscription[][] = [];
    const warnings: string[] = [];
    const waits: number[] = [];
    let release: (() => void) | undefined;
    const watcher = watchSubscriptions({
      keeper: {
        sync: async () => {
          looks++;
          if (looks === 2) throw new Error("rpc down");
          return [];
        },
      },
      intervalMs: 5_000,
      wait: (ms) => {
        waits.push(ms);
        // Three looks, then hold the loop until stopped.
        if (waits.length < 3) return Promise.resolve();
        return new Promise<void>((resolve) => {
          release = resolve;
        });
      },
      logger: { warn: (_obj, msg) => warnings.push(msg) },
      onSync: (synced) => seen.push(synced),
    });
    while (release === undefined) await new Promise((resolve) => setImmediate(resolve));
    const stopping = watcher.stop();
    release();
    await stopping;
    expect(looks).toBe(3);
    expect(seen).toHaveLength(2);
    expect(warnings).toEqual(["subscription watcher: look failed"]);
    expect(waits).toEqual([5_000, 5_000, 5_000]);
  });
});
