/** The public shapes of the subscription indexer (subscriptionIndexer.ts). */

export type SubscriptionIndexerOptions = {
  /**
   * Where a fresh index (no cursor yet) starts: `"genesis"` replays every log from block 0 (the
   * default on devnets), `"snapshot"` reads every plan and subscription at the current head and
   * follows logs from there (the default elsewhere: no history scan), or a block number to replay from
   * (the manager's deployment block).
   */
  start?: "genesis" | "snapshot" | bigint | undefined;
  /**
   * How often the chain is read for new logs when nothing says there are any. With no confirmations
   * (the default) the manager's logs wake the indexer (chainWatch.ts) and this is a backstop (default
   * 30 s); with confirmations the head is followed at this interval (default 1000 ms).
   */
  pollIntervalMs?: number | undefined;
  /** Blocks per `eth_getLogs` call (default the facilitator's `logsRange`, else 2000; halved on a refusal). */
  chunkSize?: number | undefined;
  /** Blocks to stay behind the head, as protection against reorgs (default 0). */
  confirmations?: number | undefined;
};

export type SyncResult = { fromBlock: bigint; toBlock: bigint; logs: number };

export type SubscriptionIndexer = {
  /** Reads and applies every log up to the (confirmed) head; concurrent calls run one after another. */
  syncOnce(): Promise<SyncResult>;
  /** Asks the background loop to sync now. */
  poke(): void;
  /** The last block applied, or `undefined` before the first sync. */
  cursor(): Promise<bigint | undefined>;
  start(): Promise<void>;
  stop(): Promise<void>;
};
