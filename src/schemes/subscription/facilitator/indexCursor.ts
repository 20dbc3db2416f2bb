/**
 * The indexer's cursor in `chain_cursors`: the last block applied and its hash, which tells whether
 * the chain still has that block; and the reset that drops a deployment's index when it does not.
 */
import { BlockNotFoundError } from "viem";
import { z } from "zod";
import { BigintColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
import type { IndexerDeps } from "./indexerDeps.ts";

const CursorRowSchema = z.object({ block_number: BigintColumnSchema, block_hash: z.string().nullable() });

export async function readCursorRow(deps: IndexerDeps, db: Queryable = deps.ctx.store, lock = false) {
  return queryOneParsed(
    db,
    CursorRowSchema,
    `SELECT block_number, block_hash FROM chain_cursors WHERE name = $1${lock ? " FOR UPDATE" : ""}`,
    [deps.cursorName],
  );
}

export async function readCursor(
  deps: IndexerDeps,
  db: Queryable = deps.ctx.store,
  lock = false,
): Promise<bigint | undefined> {
  return (await readCursorRow(deps, db, lock))?.block_number;
}

/** Sets the cursor to `block` with its hash, in `db` (the caller's transaction holds the row). */
export async function setCursor(db: Queryable, deps: IndexerDeps, block: bigint, hash: string | null) {
  await db.query(
    "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now() WHERE name = $1",
    [deps.cursorName, block, hash],
  );
}

export async function blockHash(deps: IndexerDeps, blockNumber: bigint): Promise<string | null> {
  if (blockNumber < 0n) return null;
  const block = await deps.client.getBlock({ blockNumber });
  return block.hash?.toLowerCase() ?? null;
}

export async function blockHashOrNull(deps: IndexerDeps, blockNumber: bigint): Promise<string | null> {
  try {
    return await blockHash(deps, blockNumber);
  } catch (error) {
    if (error instanceof BlockNotFoundError) return null;
    throw error;
  }
}

/** True when the chain no longer has the block the cursor was written at (restarted or reorganised). */
export async function chainReplaced(deps: IndexerDeps): Promise<boolean> {
  const row = await readCursorRow(deps);
  if (row === undefined || row.block_number < 0n || row.block_hash === null) return false;
  try {
    const block = await deps.client.getBlock({ blockNumber: row.block_number });
    return block.hash?.toLowerCase() !== row.block_hash;
  } catch (error) {
    if (error instanceof BlockNotFoundError) return true;
    throw error;
  }
}

/** Forgets this deployment's index so it is rebuilt from the chain as it is now. */
export async function resetIndex(deps: IndexerDeps): Promise<void> {
  const { ctx, manager, cursorName } = deps;
  deps.log.warn(
    { cursor: cursorName },
    "the chain no longer has the indexed blocks; rebuilding the subscription index",
  );
  await ctx.store.transaction(async (tx) => {
    const scopeParams = [ctx.chainId, manager.toLowerCase()];
    await tx.query("DELETE FROM subscriptions WHERE chain_id = $1 AND manager = $2", scopeParams);
    await tx.query("DELETE FROM plans WHERE chain_id = $1 AND manager = $2", scopeParams);
    await tx.query("DELETE FROM renewal_attempts WHERE chain_id = $1 AND manager = $2", scopeParams);
    await tx.query("DELETE FROM indexed_logs WHERE chain_id = $1", [ctx.chainId]);
    await tx.query("DELETE FROM chain_cursors WHERE name = $1", [cursorName]);
  });
}
