/**
 * One sync of the index: a replaced chain followed (or the index rebuilt), a fresh index started, then
 * the manager's logs read in chunks up to the (confirmed) head and each chunk applied in one store
 * transaction with the cursor that says it was read, after a compare-and-set on the cursor row.
 */
import type { Log } from "viem";
import { decodeSubscriptionEvents } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import type { Queryable } from "../../../store/store.ts";
import { applyManagerEvent } from "./applyManagerEvent.ts";
import { blockHash, chainReplaced, readCursor, readCursorRow, resetIndex, setCursor } from "./indexCursor.ts";
import { type IndexerDeps, type ManagerEvent, REORG_DEPTH } from "./indexerDeps.ts";
import { followReorganisation } from "./indexReorganisation.ts";
import { initialiseIndex } from "./indexSnapshot.ts";
import type { SyncResult } from "./subscriptionIndexerTypes.ts";

export type LogReader = {
  /** Logs from `fromBlock` to at most `toBlock`, in the widest range the provider accepts. */
  read(fromBlock: bigint, toBlock: bigint): Promise<{ logs: Log[]; toBlock: bigint }>;
};

/** Reads the manager's logs `chunkSize` blocks at a time, halving the range whenever it is refused. */
export function createLogReader(deps: IndexerDeps, chunkSize: bigint): LogReader {
  return {
    async read(fromBlock, toBlock) {
      for (;;) {
        const end = fromBlock + chunkSize - 1n < toBlock ? fromBlock + chunkSize - 1n : toBlock;
        try {
          const logs = await deps.client.getLogs({ address: deps.manager, fromBlock, toBlock: end });
          return { logs, toBlock: end };
        } catch (error) {
          // Providers refuse wide ranges or large results in various words; a narrower range is the cure.
          if (isChainUnreachable(error) || chunkSize === 1n) throw error;
          chunkSize = chunkSize / 2n > 0n ? chunkSize / 2n : 1n;
          deps.log.debug({ chunkSize }, "getLogs refused; narrowing the range");
        }
      }
    },
  };
}

export type SyncSettings = {
  confirmations: bigint;
  start: "genesis" | "snapshot" | bigint;
  logs: LogReader;
};

/** One sync (callers serialise them). */
export async function syncIndex(deps: IndexerDeps, settings: SyncSettings): Promise<SyncResult> {
  const latest = await deps.client.getBlockNumber({ cacheTime: 0 });
  const head = latest - settings.confirmations;
  if (await chainReplaced(deps)) {
    const cursorRow = await readCursorRow(deps);
    if (cursorRow !== undefined && cursorRow.block_number - latest > REORG_DEPTH) await resetIndex(deps);
    else if (cursorRow !== undefined) await followReorganisation(deps, cursorRow.block_number);
  }
  let cursor = await readCursor(deps);
  if (cursor === undefined) {
    await initialiseIndex(deps, settings.start, head < 0n ? 0n : head);
    cursor = (await readCursor(deps)) ?? -1n;
  }
  const fromBlock = cursor + 1n;
  let applied = 0;
  while (cursor < head) {
    const step = await applyNextChunk(deps, settings.logs, cursor, head);
    applied += step.applied;
    cursor = step.cursor;
  }
  return { fromBlock, toBlock: cursor, logs: applied };
}

/**
 * Reads and applies the chunk after `expected`; the cursor it leaves (another instance's, when that
 * one moved it first) and how many logs it applied.
 */
async function applyNextChunk(
  deps: IndexerDeps,
  logs: LogReader,
  expected: bigint,
  head: bigint,
): Promise<{ cursor: bigint; applied: number }> {
  const { ctx } = deps;
  const chunk = await logs.read(expected + 1n, head);
  const hash = await blockHash(deps, chunk.toBlock);
  const events = decodeSubscriptionEvents(chunk.logs).sort((a, b) =>
    a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1,
  );
  if (events.length === 0) {
    // Nothing to apply: move the cursor with a compare-and-set instead of a transaction.
    const moved = await ctx.store.query(
      `UPDATE chain_cursors SET block_number = $2, block_hash = $4, updated_at = now()
       WHERE name = $1 AND block_number = $3 RETURNING name`,
      [deps.cursorName, chunk.toBlock, expected, hash],
    );
    return {
      cursor: moved.length === 1 ? chunk.toBlock : ((await readCursor(deps)) ?? expected),
      applied: 0,
    };
  }
  const outcome = await ctx.store.transaction(async (tx) => {
    const current = await readCursor(deps, tx, true);
    if (current !== expected) return { raced: current };
    let count = 0;
    for (const event of events) if (await applyOnce(deps, tx, event)) count++;
    await setCursor(tx, deps, chunk.toBlock, hash);
    return { applied: count };
  });
  if ("raced" in outcome) return { cursor: outcome.raced ?? expected, applied: 0 };
  return { cursor: chunk.toBlock, applied: outcome.applied };
}

/** Applies a log of the manager unless it was applied before (recorded in `indexed_logs`). */
async function applyOnce(deps: IndexerDeps, tx: Queryable, event: ManagerEvent): Promise<boolean> {
  if (event.address.toLowerCase() !== deps.manager.toLowerCase()) return false;
  const inserted = await tx.query(
    `INSERT INTO indexed_logs (chain_id, tx_hash, log_index, block_number, block_hash)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING log_index`,
    [
      deps.ctx.chainId,
      event.transactionHash.toLowerCase(),
      event.logIndex,
      event.blockNumber,
      event.blockHash?.toLowerCase() ?? null,
    ],
  );
  if (inserted.length === 0) return false;
  await applyManagerEvent(deps, tx, event);
  return true;
}
