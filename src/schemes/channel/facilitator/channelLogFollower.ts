/**
 * Follows the channel contract's logs for opens, close requests and closes made on chain: on its first look
 * it reads every watched channel once and the logs of the last `logsRange` blocks, then the logs since its
 * last look, in steps of at most `logsRange` blocks.
 *
 * An open is recorded here when no relaying request recorded it: the instance that sent it died between
 * the transaction and its row (another instance's follower, or its own after a restart within the window,
 * announces `channel.opened`), or the payer opened it on chain itself. Only channels in served tokens
 * (servedToken.ts): a fake token's opens name a payer who signed nothing.
 */
import type { Address, Hex } from "viem";
import { pageLogRanges } from "../../../chain/actions/getLogsPaged.ts";
import { tollgateChannelsAbi } from "../../../chain/contracts/artifacts/TollgateChannels.ts";
import { readChainChannel } from "./channelChain.ts";
import { recordClosed, recordOpened } from "./channelClaimEvents.ts";
import type { ChannelClaimWorkerContext } from "./channelClaimTypes.ts";
import {
  findChannel,
  markClosed,
  markCloseRequested,
  upsertChannel,
  watchedChannels,
} from "./channelRecords.ts";
import { servedTokenOf } from "./servedToken.ts";

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

/** Records an open no relaying request recorded, read back from the chain for the channel's whole row. */
async function recordOpenLog(ctx: ChannelClaimWorkerContext, log: ContractLog) {
  const { channelId, token } = log.args as { channelId: Hex; token: Address };
  if (log.transactionHash === null || servedTokenOf(ctx.tokens, { token }) === undefined) return;
  if ((await findChannel(ctx.store, channelId))?.open_tx != null) return;
  const chain = await readChainChannel(
    ctx.publicClient,
    { chainId: ctx.chainId, contract: ctx.contract },
    channelId,
  );
  if (chain === undefined) return; // undone by a reorganisation since the log was read
  const transaction = log.transactionHash;
  await ctx.store.transaction((db) => recordOpened(ctx, db, chain, null, transaction));
}

/** Records the opens, close requests and closes among the contract's logs, in their order. */
async function recordChannelLogs(ctx: ChannelClaimWorkerContext, logs: readonly ContractLog[]) {
  for (const log of logs) {
    if (log.eventName === "ChannelOpened") {
      await recordOpenLog(ctx, log);
    } else if (log.eventName === "CloseRequested") {
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
  let watchedRead = false;

  async function follow(): Promise<void> {
    const latest = await ctx.publicClient.getBlockNumber({ cacheTime: 0 });
    // First look since start: the logs of the last window (an open relayed just before a crash has a log
    // but no row), then every watched channel once — after the logs, so a close they hold is announced
    // before the chain's read marks its row closed.
    if (fromBlock === undefined) fromBlock = latest >= logsRange ? latest - logsRange + 1n : 0n;
    if (latest >= fromBlock) {
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
      await recordChannelLogs(ctx, logs);
      fromBlock = toBlock + 1n;
    }
    if (!watchedRead) {
      await readWatchedChannels(ctx);
      watchedRead = true;
    }
  }

  return { follow };
}
