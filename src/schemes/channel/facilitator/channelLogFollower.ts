/**
 * Follows the channel contract's logs for close requests and closes made on chain by payers (or anyone):
 * on its first look it reads every watched channel once, then it reads the logs since its last look, in
 * steps of at most `logsRange` blocks.
 */
import type { Address, Hex } from "viem";
import { pageLogRanges } from "../../../chain/actions/getLogsPaged.ts";
import { tollgateChannelsAbi } from "../../../chain/contracts/artifacts/TollgateChannels.ts";
import { readChainChannel } from "./channelChain.ts";
import { recordClosed } from "./channelClaimEvents.ts";
import type { ChannelClaimWorkerContext } from "./channelClaimTypes.ts";
import {
  findChannel,
  markClosed,
  markCloseRequested,
  upsertChannel,
  watchedChannels,
} from "./channelRecords.ts";

export type ChannelLogFollower = {
  /** Learns of close requests and closes made on chain since the last look. */
  follow(): Promise<void>;
};

type ContractLog = {
  eventName: string;
  args: unknown;
  transactionHash: Hex | null;
};

/** First look since start: reads every watched channel once. */
async function readWatchedChannels(ctx: ChannelClaimWorkerContext) {
  const where = { chainId: ctx.chainId, contract: ctx.contract };
  for (const row of await watchedChannels(ctx.store, ctx.contract, 1_000)) {
    const chain = await readChainChannel(ctx.publicClient, where, row.channel_id as Hex);
    if (chain !== undefined) await upsertChannel(ctx.store, chain);
  }
}

/** Records the close requests and closes among the contract's logs, in their order. */
async function recordCloseLogs(ctx: ChannelClaimWorkerContext, logs: readonly ContractLog[]) {
  for (const log of logs) {
    if (log.eventName === "CloseRequested") {
      const { channelId, requestedAt } = log.args as { channelId: Hex; requestedAt: bigint };
      await markCloseRequested(ctx.store, channelId, Number(requestedAt));
    } else if (log.eventName === "ChannelClosed") {
      const { channelId, claimed, refunded, by } = log.args as {
        channelId: Hex;
        claimed: bigint;
        refunded: bigint;
        by: Address;
      };
      await ctx.store.transaction(async (db) => {
        const row = await findChannel(db, channelId);
        if (row === undefined || !(await markClosed(db, channelId, claimed))) return;
        await recordClosed(ctx, db, row, claimed, refunded, log.transactionHash, by);
      });
    }
  }
}

export function createChannelLogFollower(
  ctx: ChannelClaimWorkerContext,
  logsRange: bigint,
): ChannelLogFollower {
  let fromBlock: bigint | undefined;

  async function follow(): Promise<void> {
    const latest = await ctx.publicClient.getBlockNumber({ cacheTime: 0 });
    if (fromBlock === undefined) {
      // First look since start: read every watched channel once, then follow the logs.
      await readWatchedChannels(ctx);
      fromBlock = latest + 1n;
      return;
    }
    if (latest < fromBlock) return;
    // Public RPCs cap a log query's block range: follow the chain in steps.
    const toBlock = latest - fromBlock >= logsRange ? fromBlock + logsRange - 1n : latest;
    // And within a step, in pages the provider accepts (narrower when it refuses one as too large).
    const logs = await pageLogRanges(
      ctx.publicClient,
      { fromBlock, toBlock, maxRange: logsRange },
      (from, to) =>
        ctx.publicClient.getContractEvents({
          address: ctx.contract,
          abi: tollgateChannelsAbi,
          fromBlock: from,
          toBlock: to,
        }),
    );
    await recordCloseLogs(ctx, logs);
    fromBlock = toBlock + 1n;
  }

  return { follow };
}
