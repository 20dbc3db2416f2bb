/** The public shapes of the renewal keeper (renewalKeeper.ts). */
import type { Hash } from "viem";

export type RenewalKeeperOptions = {
  /** Time between runs of the background loop (default 30 000 ms). */
  intervalMs?: number | undefined;
  /** Subscriptions per `collectMany` transaction (default 50). */
  batchSize?: number | undefined;
  /** Chain seconds before a failed renewal of the same period is tried again (default 86 400). */
  retryAfterSeconds?: number | undefined;
  /** Failed attempts per period after which the keeper leaves the subscription PastDue (default 4). */
  maxAttempts?: number | undefined;
  /**
   * Time to live of the keeper's lease (default 15 000 ms). The instance running renews it every third
   * of that while its run lasts, so a run may take longer; a lease left by an instance that died (its
   * renewals stopped) is taken over once this much time passed since its last renewal.
   */
  leaseMs?: number | undefined;
  /** How long a run waits for another instance's run to end before giving up (default 120 000 ms). */
  waitForLeaseMs?: number | undefined;
};

export type KeeperRun = {
  /** The chain time the run judged due-ness by. */
  chainTime: number;
  /** Subscription ids sent to `collectMany`. */
  attempted: string[];
  renewed: string[];
  /** Ids whose pull failed (now PastDue). */
  failed: string[];
  /**
   * Ids whose collection reverts the whole call even alone (found by splitting a batch that would
   * revert); not sent, retried after the back-off of a failed pull.
   */
  isolated: string[];
  transactions: Hash[];
};

export type RenewalKeeper = {
  /** One pass: collects every due subscription now, in batches. */
  runOnce(): Promise<KeeperRun>;
  start(): Promise<void>;
  stop(): Promise<void>;
};
