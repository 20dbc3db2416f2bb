/**
 * Watching confirmed outbox rows until they are deep enough that a reorganisation is no longer expected
 * (`windowBlocks` below the head): a row whose transaction left the canonical chain is reopened and its
 * recorded bytes are broadcast again (docs/facilitator.md, "Reorganisations"). Only rows of kinds whose
 * producer registered a reopen hook (`outbox.onReorg`) are watched: settlement batches, renewals, usage
 * deductions.
 *
 * Invariants:
 * 1. Cheap: a check first reads the store for confirmed rows of watched kinds still in the window (mined
 *    within `windowBlocks` of the head last read, and confirmed less than `maxWatchMs` ago); with none it
 *    makes no RPC call and says so (a facilitator at rest polls the chain for nothing). Otherwise it reads
 *    the head block (one call) and stops there when its hash is the one the last check saw and every row
 *    was compared by that check (a row confirmed since may sit in a block rolled back to that very
 *    head); else it reads
 *    one block per distinct block holding a watched row and compares its hash with the row's. Never a
 *    call per item.
 * 2. Durable: a row's block hash is recorded with its outcome (`tx_outbox.block_hash`, from the receipt),
 *    and learned from a receipt once for rows recorded without one; the first check of a worker takes
 *    every row in the window. A facilitator that restarts, or another instance, notices a reorganisation
 *    that happened while it was down, as long as the row is still in the window.
 * 3. A row whose block is not the canonical block at its height any more, and whose transaction has no
 *    receipt at that height, is reopened in ONE store transaction: the row goes `confirmed` → `broadcast`
 *    (a compare-and-set on its status and block; stale, so a worker drives it at once), and the kind's
 *    hook, in the same transaction, undoes what the kind's handler recorded from the undone receipt (each
 *    write a compare-and-set on the state it leaves). Two instances reopen a row once; a crash before the
 *    commit leaves it confirmed (the next check finds it again); after the commit the open row is driven
 *    like any other after a restart.
 * 4. The outbox then broadcasts the row's recorded bytes again (the same call at the same nonce, never a
 *    second signature; createOutbox.ts invariant 2), and the kind's handler records the new receipt as a
 *    first outcome. Should the chain already hold another transaction at that nonce, the row ends
 *    `dropped`/`displaced` and the handler reads what happened from the chain, as for any dropped row.
 *
 * Rows that ended `reverted` or `dropped` are not watched: a reverted transaction changed nothing but its
 * nonce and gas, and its producer already put its items back; a dropped one was never mined.
 */
import type { Logger } from "pino";
import type { Address, Hash, PublicClient } from "viem";
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import type { OutboxReopenHook, ReopenedRow } from "./outboxTypes.ts";

export type ConfirmedRowWatchClient = Pick<PublicClient, "getBlock" | "getTransactionReceipt">;

export type ConfirmedRowWatchOptions = {
  store: Store;
  client: ConfirmedRowWatchClient;
  scope: { chainId: number; sender: Address };
  logger: Logger;
  /** Told of each row reopened, after its store transaction committed (the metrics). */
  onReopened?: ((kind: string) => void) | undefined;
  /** The registered reopen hooks by kind; only these kinds are watched. */
  hooks: ReadonlyMap<string, OutboxReopenHook>;
  /** Rows mined within this many blocks of the head are watched (default 64). */
  windowBlocks?: number | undefined;
  /**
   * And at most this long after their outcome was recorded (default 15 min): a chain that mines no
   * block (an automining devnet at rest) is not watched for ever.
   */
  maxWatchMs?: number | undefined;
};

export type ConfirmedRowWatch = {
  /**
   * Compares the recently confirmed rows with the canonical chain: resolves with the rows reopened, and
   * whether any row is still watched (`false`: nothing to check until a next outcome).
   */
  check(): Promise<{ reopened: number[]; watching: boolean }>;
};

const HashText = z.string().regex(/^0x[0-9a-f]{64}$/) as z.ZodType<Hash>;

const WatchedRowSchema = z.object({
  id: SafeIntColumnSchema,
  kind: z.string(),
  owner: z.string(),
  meta: z.record(z.string(), z.unknown()).nullable(),
  tx_hash: HashText,
  block_number: BigintColumnSchema,
  block_hash: HashText.nullable(),
});
type WatchedRow = z.infer<typeof WatchedRowSchema>;

/** What the watch's steps read and write through: the options with their defaults filled in. */
type WatchContext = {
  store: Store;
  client: ConfirmedRowWatchClient;
  scope: { chainId: number; sender: Address };
  hooks: ReadonlyMap<string, OutboxReopenHook>;
  maxWatchMs: number;
  log: Logger;
  onReopened: ((kind: string) => void) | undefined;
};

export function createConfirmedRowWatch(options: ConfirmedRowWatchOptions): ConfirmedRowWatch {
  const context: WatchContext = {
    store: options.store,
    client: options.client,
    scope: options.scope,
    hooks: options.hooks,
    maxWatchMs: options.maxWatchMs ?? 15 * 60_000,
    log: options.logger.child({ component: "reorg-watch" }),
    onReopened: options.onReopened,
  };
  const { client, hooks } = context;
  const windowBlocks = BigInt(options.windowBlocks ?? 64);
  let lastHead: Hash | undefined;
  /** The head's number at the last check: rows at or below it minus the window are final. */
  let lastHeadNumber: bigint | undefined;
  /**
   * The rows the last full check compared with the chain. An unchanged head hash says nothing about a
   * row confirmed since: mined in a block above the head that check saw and rolled back to it, the head
   * is the same block again.
   */
  let lastChecked = new Set<number>();

  async function check(): Promise<{ reopened: number[]; watching: boolean }> {
    if (hooks.size === 0) return { reopened: [], watching: false };
    const floor = lastHeadNumber === undefined ? -1n : lastHeadNumber - windowBlocks;
    const candidates = await watchedRows(context, floor);
    if (candidates.length === 0) return { reopened: [], watching: false };
    const head = await client.getBlock({ blockTag: "latest" });
    const headNumber = head.number ?? lastHeadNumber ?? 0n;
    lastHeadNumber = headNumber;
    if (
      head.hash !== null &&
      head.hash === lastHead &&
      candidates.every((r) => lastChecked.has(Number(r.id)))
    ) {
      return { reopened: [], watching: true };
    }
    const rows = await watchedRows(context, headNumber - windowBlocks);
    const reopened = await compareWithChain(context, rows, headNumber);
    lastHead = head.hash ?? undefined;
    lastChecked = new Set(rows.filter((r) => !reopened.includes(r.id)).map((r) => Number(r.id)));
    return { reopened, watching: true };
  }

  return { check };
}

/** Confirmed rows of watched kinds mined above `floor` and confirmed within `maxWatchMs`: the newest 512. */
function watchedRows(context: WatchContext, floor: bigint): Promise<WatchedRow[]> {
  const { scope, hooks } = context;
  return queryParsed(
    context.store,
    WatchedRowSchema,
    `SELECT * FROM (
       SELECT id, kind, owner, meta, tx_hash, block_number, block_hash FROM tx_outbox
       WHERE chain_id = $1 AND sender = $2 AND status = 'confirmed' AND kind = ANY($3::text[])
         AND tx_hash IS NOT NULL AND block_number IS NOT NULL AND block_number > $4
         AND done_at > now() - $5::float8 * interval '1 millisecond'
       ORDER BY block_number DESC, id DESC LIMIT 512
     ) AS w ORDER BY block_number, id`,
    [scope.chainId, scope.sender.toLowerCase(), [...hooks.keys()], floor, context.maxWatchMs],
  );
}

/**
 * Compares each row in the window with the canonical chain, one block read per block holding rows:
 * learns the block hashes not recorded yet and reopens the rows whose block left the chain. Resolves
 * with the rows reopened.
 */
async function compareWithChain(
  context: WatchContext,
  rows: readonly WatchedRow[],
  headNumber: bigint,
): Promise<number[]> {
  const byBlock = new Map<bigint, WatchedRow[]>();
  for (const row of rows) byBlock.set(row.block_number, [...(byBlock.get(row.block_number) ?? []), row]);
  const reopened: number[] = [];
  for (const [number, group] of byBlock) {
    // One block read for the rows whose block hash is recorded; a receipt for the others.
    let canonical: Hash | undefined;
    if (group.some((r) => r.block_hash !== null) && number <= headNumber) {
      canonical = (await context.client.getBlock({ blockNumber: number })).hash ?? undefined;
    }
    for (const row of group) {
      if (row.block_hash !== null && row.block_hash === canonical) continue;
      const at = await minedAt(context, row);
      if (at !== undefined && (row.block_hash === null || at === row.block_hash)) {
        // Learned once, kept for later checks and for a restarted worker.
        await context.store.query(
          `UPDATE tx_outbox SET block_hash = $2 WHERE id = $1 AND status = 'confirmed' AND block_hash IS NULL`,
          [row.id, at.toLowerCase()],
        );
        continue;
      }
      if (await reopen(context, row)) {
        reopened.push(row.id);
        context.onReopened?.(row.kind);
      }
    }
  }
  return reopened;
}

/** The block hash the row's transaction is mined in now at its recorded height, or `undefined`. */
async function minedAt(context: WatchContext, row: WatchedRow): Promise<Hash | undefined> {
  try {
    const receipt = await context.client.getTransactionReceipt({ hash: row.tx_hash });
    return receipt.blockNumber === row.block_number ? receipt.blockHash : undefined;
  } catch (error) {
    if (error instanceof Error && error.name === "TransactionReceiptNotFoundError") return undefined;
    throw error;
  }
}

/** Reopens a row whose block left the chain, with its kind's hook, in one transaction (invariant 3). */
async function reopen(context: WatchContext, row: WatchedRow): Promise<boolean> {
  const hook = context.hooks.get(row.kind);
  if (hook === undefined) return false;
  return context.store.transaction(async (tx) => {
    const moved = await tx.query(
      `UPDATE tx_outbox SET status = 'broadcast', block_number = NULL, block_hash = NULL, done_at = NULL,
         updated_at = now() - interval '1 day'
       WHERE id = $1 AND status = 'confirmed' AND block_number = $2 RETURNING id`,
      [row.id, row.block_number],
    );
    if (moved.length === 0) return false;
    const reopened: ReopenedRow = {
      id: row.id,
      kind: row.kind,
      owner: row.owner,
      meta: row.meta,
      hash: row.tx_hash,
      blockNumber: row.block_number,
    };
    await hook(tx, reopened);
    context.log.warn(
      {
        id: row.id,
        kind: row.kind,
        owner: row.owner,
        transaction: row.tx_hash,
        blockNumber: row.block_number,
      },
      "a confirmed transaction left the chain (a reorganisation); it is sent again",
    );
    return true;
  });
}
