/**
 * Watching one-time settlement batches after their outcome was recorded, until they are deep enough
 * that a reorganisation is no longer expected (`windowBlocks` below the head): a batch whose
 * transaction left the canonical chain is settled again (docs/facilitator.md, "Reorganisations").
 *
 * Invariants:
 * 1. Cheap: a check first reads the store for confirmed batches still in the window (mined within
 *    `windowBlocks` of the head last read, and confirmed less than `maxWatchMs` ago); with none it makes
 *    no RPC call and says so, and the engine stops checking until its next outcome (a facilitator at
 *    rest polls nothing). Otherwise it reads the head block (one call) and stops there when its hash is
 *    the one the last check saw; else it compares one block hash per distinct block holding a watched
 *    batch (a batch's own block hash is learned once, from its receipt). Never a call per payment.
 * 2. A batch whose transaction has no receipt any more, or one in another block, is reopened in ONE
 *    store transaction: its outbox row goes back to `broadcast` (stale, so a worker drives it at once),
 *    the batch back to `submitted`, and the payments that batch settled back to `submitted` in it, their
 *    proofs withdrawn. Each write is a compare-and-set on the state it leaves, and the batch and its
 *    payments move only when the outbox row did: two instances reopen a batch once, a crash before the
 *    commit leaves it confirmed (the next check finds it again), and after the commit the open row is
 *    driven like any other after a restart. Nothing is lost in between: the payments are never in no
 *    state, and never in the queue while their old transaction can still be mined.
 * 3. The outbox then broadcasts the batch's recorded bytes again (the same call at the same nonce, never
 *    a second signature; createOutbox.ts invariant 2), and batchOutcome.ts records its outcome as a
 *    first one: the token refuses a second use of an authorization, so nothing is paid twice; an item
 *    someone else meanwhile settled with exactly its transfer is settled by that transaction; one the
 *    token now refuses (the payer emptied the wallet) fails, and its `payment.failed` event tells the
 *    provider who already served on the proof. A payment's `payment.settled` event is recorded once:
 *    a reopened payment keeps the `block_number` of the undone settlement, which paymentOutcomes.ts
 *    reads as the mark of one already announced.
 *
 * Only one-time payments' batches (kind `settlement`) are watched; renewals, usage deductions and
 * channel claims are not.
 */
import type { Logger } from "pino";
import type { Hash, PublicClient } from "viem";
import type { Store } from "../../store/store.ts";

export type SettledBatchWatchClient = Pick<PublicClient, "getBlock" | "getTransactionReceipt">;

export type SettledBatchWatchOptions = {
  store: Store;
  client: SettledBatchWatchClient;
  network: string;
  logger: Logger;
  /** Batches mined within this many blocks of the head are watched (default 64). */
  windowBlocks?: number | undefined;
  /**
   * And at most this long after their outcome was recorded (default 15 min): a chain that mines no
   * block (an automining devnet at rest) is not watched for ever.
   */
  maxWatchMs?: number | undefined;
  /** A batch was reopened: its outbox row waits to be driven (the outbox's `wake`). */
  onReopened(batchIds: readonly number[]): void;
};

export type SettledBatchWatch = {
  /**
   * Compares the recently settled batches with the canonical chain: resolves with the batches
   * reopened, and whether any batch is still watched (`false`: nothing to check until a next outcome).
   */
  check(): Promise<{ reopened: number[]; watching: boolean }>;
};

type WatchedBatch = { id: number; outbox_id: string; tx_hash: Hash; block_number: string };

export function createSettledBatchWatch(options: SettledBatchWatchOptions): SettledBatchWatch {
  const { store, client, network } = options;
  const windowBlocks = BigInt(options.windowBlocks ?? 64);
  const log = options.logger.child({ component: "settlement" });
  /** Each watched batch's block hash, as its receipt gave it. */
  const blockOf = new Map<number, Hash>();
  const maxWatchMs = options.maxWatchMs ?? 15 * 60_000;
  let lastHead: Hash | undefined;
  /** The head's number at the last check: batches at or below it minus the window are final. */
  let lastHeadNumber: bigint | undefined;

  /** The block hash the batch's transaction is mined in now at its recorded height, or `undefined`. */
  async function minedAt(batch: WatchedBatch): Promise<Hash | undefined> {
    try {
      const receipt = await client.getTransactionReceipt({ hash: batch.tx_hash });
      return receipt.blockNumber === BigInt(batch.block_number) ? receipt.blockHash : undefined;
    } catch (error) {
      if (error instanceof Error && error.name === "TransactionReceiptNotFoundError") return undefined;
      throw error;
    }
  }

  async function reopen(batch: WatchedBatch): Promise<boolean> {
    return store.transaction(async (tx) => {
      const row = await tx.query(
        `UPDATE tx_outbox SET status = 'broadcast', block_number = NULL, done_at = NULL,
           updated_at = now() - interval '1 day'
         WHERE id = $1 AND status = 'confirmed' AND kind = 'settlement' RETURNING id`,
        [batch.outbox_id],
      );
      if (row.length === 0) return false;
      await tx.query(
        `UPDATE settlement_batches SET status = 'submitted', block_number = NULL, updated_at = now()
         WHERE id = $1 AND status = 'confirmed'`,
        [batch.id],
      );
      const payments = await tx.query(
        `UPDATE payments SET status = 'submitted', tx_hash = NULL, proof = NULL, settled_at = NULL,
           updated_at = now()
         WHERE batch_id = $1 AND status = 'settled' AND tx_hash = $2 RETURNING id`,
        [batch.id, batch.tx_hash],
      );
      log.warn(
        {
          batch: batch.id,
          transaction: batch.tx_hash,
          blockNumber: batch.block_number,
          payments: payments.length,
        },
        "a settled batch left the chain (a reorganisation); its transaction is sent again",
      );
      return true;
    });
  }

  /** Confirmed batches mined above `floor` and confirmed within `maxWatchMs`: the newest 512. */
  function watchedBatches(floor: bigint): Promise<WatchedBatch[]> {
    return store.query<WatchedBatch>(
      `SELECT * FROM (
         SELECT id, outbox_id, tx_hash, block_number FROM settlement_batches
         WHERE network = $1 AND status = 'confirmed' AND outbox_id IS NOT NULL AND tx_hash IS NOT NULL
           AND block_number IS NOT NULL AND block_number > $2
           AND updated_at > now() - $3::float8 * interval '1 millisecond'
         ORDER BY block_number DESC, id DESC LIMIT 512
       ) AS w ORDER BY block_number, id`,
      [network, floor, maxWatchMs],
    );
  }

  async function check(): Promise<{ reopened: number[]; watching: boolean }> {
    const floor = lastHeadNumber === undefined ? -1n : lastHeadNumber - windowBlocks;
    if ((await watchedBatches(floor)).length === 0) {
      blockOf.clear();
      return { reopened: [], watching: false };
    }
    const head = await client.getBlock({ blockTag: "latest" });
    lastHeadNumber = head.number ?? lastHeadNumber;
    if (head.hash !== null && head.hash === lastHead) return { reopened: [], watching: true };
    const batches = await watchedBatches((head.number ?? 0n) - windowBlocks);
    const watched = new Set(batches.map((b) => Number(b.id)));
    for (const id of blockOf.keys()) if (!watched.has(id)) blockOf.delete(id);
    const byBlock = new Map<string, WatchedBatch[]>();
    for (const batch of batches) {
      const group = byBlock.get(batch.block_number) ?? [];
      group.push({ ...batch, id: Number(batch.id) });
      byBlock.set(batch.block_number, group);
    }
    const reopened: number[] = [];
    for (const [number, group] of byBlock) {
      // One block read for the batches whose block hash is known; a receipt for the others.
      let canonical: Hash | undefined;
      if (group.some((b) => blockOf.has(b.id)) && BigInt(number) <= (head.number ?? 0n)) {
        canonical = (await client.getBlock({ blockNumber: BigInt(number) })).hash ?? undefined;
      }
      for (const batch of group) {
        const known = blockOf.get(batch.id);
        if (known !== undefined && known === canonical) continue;
        const at = await minedAt(batch);
        if (at !== undefined && (known === undefined || at === known)) {
          blockOf.set(batch.id, at);
          continue;
        }
        blockOf.delete(batch.id);
        if (await reopen(batch)) reopened.push(batch.id);
      }
    }
    lastHead = head.hash ?? undefined;
    if (reopened.length > 0) options.onReopened(reopened);
    return { reopened, watching: true };
  }

  return { check };
}
