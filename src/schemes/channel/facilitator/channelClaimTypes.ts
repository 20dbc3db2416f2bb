/** The claim worker's options, what it is given, and the outbox kinds of its transactions. */
import type { Logger } from "pino";
import type { Address, PublicClient } from "viem";
import type { WatchedClient } from "../../../facilitator/chainWatch.ts";
import type { Outbox } from "../../../facilitator/outbox/outboxTypes.ts";
import type { TokenPauseWatch } from "../../../facilitator/tokenPauseWatch.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Queryable, Store } from "../../../store/store.ts";

export const CHANNEL_CLAIM_KIND = "channel-claim";
export const CHANNEL_CLOSE_KIND = "channel-close";

export type ChannelClaimWorkerOptions = {
  /** Claim once this much (smallest unit, all channels together) is unclaimed. Default 1 000 000. */
  thresholdValue?: bigint | undefined;
  /** Claim once the oldest unclaimed voucher is this old, whatever its value. Default 10 minutes. */
  maxAgeMs?: number | undefined;
  /**
   * Longest pause between rounds (default 30 s). New vouchers (`signal`) and the contract's logs
   * (chainWatch.ts: a close request, a close) wake the worker at once.
   */
  intervalMs?: number | undefined;
  /** Items per `claimMany`. Default 100. */
  maxBatch?: number | undefined;
  /** How long a payee's operator right (or its absence) is trusted before it is read again. Default 60 s. */
  operatorCacheMs?: number | undefined;
};

export type ChannelClaimWorkerContext = {
  store: Store;
  publicClient: Pick<PublicClient, "readContract" | "getContractEvents"> & WatchedClient;
  outbox: Pick<Outbox, "enqueue" | "wake" | "handle" | "onReorg" | "sender">;
  chainId: number;
  /** Most blocks one `eth_getLogs` call spans (default 2 000). */
  logsRange?: number | undefined;
  contract: Address;
  /** The tokens served: a row of another (one kept before rows were limited to them) is never sent. */
  tokens: readonly { address: Address }[];
  clock: Clock;
  logger: Logger;
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
  /**
   * Whether a token's issuer paused it (tokenPauseWatch.ts): its channels' claims and closes wait in
   * the table (a claim would move no money and a close would revert) until the unpause wakes the worker.
   */
  tokenPause?: Pick<TokenPauseWatch, "isPaused" | "onResume"> | undefined;
};
