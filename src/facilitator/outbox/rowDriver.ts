/**
 * Driving one outbox row to its outcome (createOutbox.ts runs one drive per open row): broadcast its
 * recorded bytes, wait for a receipt of any of its hashes, replace it with a higher fee when it sits
 * unmined, and deliver the outcome to its producer's handler.
 *
 * Invariants (numbered as in createOutbox.ts):
 * 1. Nothing is broadcast that is not recorded: a replacement's bytes and hash commit (compare-and-set
 *    on the hash it replaces) before they are sent, and the replaced hash stays in `replaced_hashes`.
 * 2. A replacement is the same call at the same nonce (`to`, `data`, `value`, `gas`), re-signed with
 *    fees at least 12.5 % above the previous ones (what nodes ask of a replacement) and at least what
 *    the chain asks now, never above `maxFeePerGas`. Whichever of the row's transactions is mined is
 *    its outcome; the others can no longer be (one nonce), so the producer is told once.
 * 3. When the node refuses bytes for good, the row is `dropped`/`refused` and its nonce filled by a
 *    zero-value transfer to self; a refused replacement is not that: the earlier transaction is still
 *    pending, so the row keeps waiting and bumps again later.
 * 4. A fee the chain asks above `maxFeePerGas` makes a row wait, never drops it: a bump that would pass
 *    the ceiling is not signed, bytes the node refuses as below the block's base fee are broadcast again
 *    each round, and the row is counted in `feeHold` (feeHold.ts) until its outcome is recorded.
 */
import type { Logger } from "pino";
import {
  type Hash,
  parseTransaction,
  type TransactionReceipt,
  TransactionReceiptNotFoundError,
  WaitForTransactionReceiptTimeoutError,
} from "viem";
import { transactionHashOf } from "../../chain/signers/eip1559Encoding.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable, Store } from "../../store/store.ts";
import { broadcastRaw } from "./broadcastRaw.ts";
import { deliverOutcome } from "./deliverOutcome.ts";
import type { FeeHold } from "./feeHold.ts";
import type { GasFees, GasKey } from "./gasKey.ts";
import {
  findOutboxRow,
  insertSignedRow,
  markBroadcast,
  type OutboxRow,
  recordReplacement,
} from "./outboxRecords.ts";
import type { OutboxHandler, OutboxOutcome, OutboxSigned } from "./outboxTypes.ts";
import { findRowReceipt, outcomeBase, receiptOutcome } from "./rowReceipts.ts";
import type { WaiterMap } from "./waiterMap.ts";

/** The kind of zero-value transfers that fill a nonce whose transaction the node refused. */
export const FILLER_KIND = "nonce-filler";

export type RowDriverClient = Parameters<typeof broadcastRaw>[0] &
  Parameters<typeof findRowReceipt>[0] & {
    waitForTransactionReceipt(args: {
      hash: Hash;
      confirmations: number;
      timeout: number;
      onReplaced: () => void;
    }): Promise<TransactionReceipt>;
  };

/** Test seams for crash tests, called at the named points of a row's life. */
export type OutboxFaults = {
  /** The row is signed and recorded; nothing is broadcast yet. */
  afterSign?: ((row: OutboxRow) => void | Promise<void>) | undefined;
  /** The row is broadcast; its outcome is not recorded yet. */
  afterBroadcast?: ((row: OutboxRow) => void | Promise<void>) | undefined;
  /** A replacement of the row is recorded; it is not broadcast yet. */
  afterReplace?: ((row: OutboxRow) => void | Promise<void>) | undefined;
};

export type RowDriverOptions = {
  store: Store;
  client: RowDriverClient;
  key: GasKey;
  logger: Logger;
  scope: { chainId: number; sender: `0x${string}` };
  handlers: ReadonlyMap<string, OutboxHandler>;
  outcomeWaiters: WaiterMap<OutboxOutcome>;
  hashWaiters: WaiterMap<OutboxSigned>;
  confirmations: number;
  /** How long one wait for a receipt lasts before the row is broadcast again (no bumping). */
  receiptTimeoutMs: number;
  /** How long a broadcast row may sit unmined before it is replaced with a higher fee; `false`: never. */
  bumpAfterMs: number | false;
  /** Delays of the looks for a fresh broadcast's receipt before the wait on new blocks (createOutbox.ts). */
  receiptPollsMs: readonly number[];
  /** The highest `maxFeePerGas` a transaction may offer; `undefined`: no ceiling. */
  maxFeePerGas: bigint | undefined;
  /** The rows waiting for the chain's fee to fall under `maxFeePerGas`. */
  feeHold: FeeHold;
  /** Called after each outcome this worker records (the gas key's runway reads its cost). */
  onOutcome?: ((outcome: OutboxOutcome) => void) | undefined;
  faults: OutboxFaults | undefined;
  /** Drives a row signed here (a nonce filler). */
  track(row: OutboxRow, fresh: boolean): void;
};

export type RowDriver = {
  /** Drives `row` (just signed here when `fresh`) to its outcome and delivers it. */
  drive(row: OutboxRow, fresh: boolean): Promise<void>;
  /** An outcome recorded here lately, so `waitFor` needs no receipt lookup for it. */
  recent(id: number): OutboxOutcome | undefined;
  /** The highest block a receipt has shown: a lower bound for the block a new row lands in. */
  lastSeenBlock(): bigint | undefined;
};

/** Nodes take a replacement at 10 % above the fees it replaces (geth); 12.5 % leaves room. */
function bumped(fee: bigint): bigint {
  return fee + (fee + 7n) / 8n;
}

/** The larger of two fees (bigints: no `Math.max`). */
function larger(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

export function createRowDriver(options: RowDriverOptions): RowDriver {
  const { store, client, key, scope, handlers, confirmations } = options;
  const log = options.logger;
  let lastSeenBlock: bigint | undefined;
  const recent = new Map<number, OutboxOutcome>();

  function outcomeOf(row: OutboxRow, receipt: TransactionReceipt): OutboxOutcome {
    if (lastSeenBlock === undefined || receipt.blockNumber > lastSeenBlock)
      lastSeenBlock = receipt.blockNumber;
    return receiptOutcome(row, receipt);
  }

  /** Delivers an outcome to the row's handler (deliverOutcome.ts) and wakes its waiters. */
  async function finish(
    row: OutboxRow,
    outcome: OutboxOutcome,
    alsoInTx?: (db: Queryable) => Promise<void>,
  ): Promise<void> {
    const handler = handlers.get(row.kind);
    if (handler === undefined) throw new TollgateError("Internal", `no outbox handler for kind ${row.kind}`);
    await deliverOutcome(store, handler, row, outcome, alsoInTx);
    options.feeHold.release(row.id);
    options.onOutcome?.(outcome);
    recent.set(row.id, outcome);
    if (recent.size > 1_000) recent.delete(recent.keys().next().value as number);
    options.outcomeWaiters.settle(row.id, (w) => w.resolve(outcome));
  }

  /** The node refused the row's bytes for good: drop it and fill its nonce so later rows can be mined. */
  async function refuse(row: OutboxRow, message: string): Promise<void> {
    log.error(
      { id: row.id, kind: row.kind, nonce: row.nonce, reason: message },
      "transaction refused by the node",
    );
    const outcome: OutboxOutcome = {
      ...outcomeBase(row),
      status: "dropped",
      reason: "refused",
      message,
      hash: null,
    };
    if (row.kind === FILLER_KIND || row.nonce === null) {
      // Nothing more to try for this nonce now; the next signing reads the chain's count again.
      key.nonces.resync();
      return finish(row, outcome);
    }
    const nonce = row.nonce;
    const raw = await key.sign({ to: key.address, data: "0x", gas: 21_000n, nonce }, await key.fees());
    let fillerId = 0;
    await finish(row, outcome, async (tx) => {
      fillerId = await insertSignedRow(tx, scope, {
        kind: FILLER_KIND,
        owner: String(row.id),
        to: key.address,
        data: "0x",
        gas: 21_000n,
        nonce,
        hash: transactionHashOf(raw),
        raw,
        fromBlock: row.from_block,
      });
    });
    const filler = fillerId === 0 ? undefined : await findOutboxRow(store, fillerId);
    if (filler !== undefined) options.track(filler, true);
  }

  /**
   * The fees a replacement of `raw` offers, or `undefined` when they would pass the ceiling. Both are
   * at least 12.5 % above the replaced ones (a node refuses less) and at least what the chain asks now
   * (`key.fees`, itself capped at the ceiling), so the last bump before the ceiling lands on it.
   */
  async function replacementFees(raw: `0x${string}`): Promise<GasFees | undefined> {
    const signed = parseTransaction(raw);
    const now = await key.fees({ fresh: true });
    const maxPriorityFeePerGas = larger(bumped(signed.maxPriorityFeePerGas ?? 0n), now.maxPriorityFeePerGas);
    let maxFeePerGas = larger(bumped(signed.maxFeePerGas ?? 0n), now.maxFeePerGas);
    if (maxFeePerGas < maxPriorityFeePerGas) maxFeePerGas = maxPriorityFeePerGas;
    if (options.maxFeePerGas !== undefined && maxFeePerGas > options.maxFeePerGas) return undefined;
    return { maxFeePerGas, maxPriorityFeePerGas };
  }

  /**
   * The row waits for the chain's fee to fall under the ceiling (feeHold.ts logs the episode, once).
   * The base fee is read for the report only, from the key's short cache: one read per few seconds
   * whatever the number of rows.
   */
  async function holdForFee(row: OutboxRow): Promise<void> {
    if (options.maxFeePerGas === undefined) return;
    const baseFee = await key.baseFee().catch(() => undefined);
    options.feeHold.hold(row.id, baseFee);
  }

  /**
   * Replaces the row's transaction with the same call at the same nonce and higher fees: recorded,
   * then broadcast. Returns the row as it stands now (another worker's replacement, if it won).
   */
  async function replace(row: OutboxRow): Promise<OutboxRow> {
    if (row.raw_tx === null || row.tx_hash === null || row.nonce === null) return row;
    const fees = await replacementFees(row.raw_tx);
    if (fees === undefined) {
      log.debug(
        { id: row.id, kind: row.kind, nonce: row.nonce, ceiling: options.maxFeePerGas?.toString() },
        "transaction unmined and its fee at the ceiling; waiting",
      );
      await holdForFee(row);
      // The node may have refused these bytes as below the base fee, or dropped them: offer them again,
      // so they are mined as soon as the base fee falls under them.
      const again = await broadcastRaw(client, row.raw_tx);
      if (again.kind === "refused")
        log.debug({ id: row.id, reason: again.message }, "broadcast again: refused");
      return row;
    }
    const raw = await key.sign(
      { to: row.to_address, data: row.data, gas: row.gas_limit, nonce: row.nonce, value: row.value },
      fees,
    );
    const recorded = await recordReplacement(store, row.id, row.tx_hash, {
      hash: transactionHashOf(raw),
      raw,
    });
    if (recorded === undefined) return (await findOutboxRow(store, row.id)) ?? row;
    log.warn(
      {
        id: row.id,
        kind: row.kind,
        nonce: row.nonce,
        replaced: row.tx_hash,
        hash: recorded.tx_hash,
        maxFeePerGas: fees.maxFeePerGas.toString(),
      },
      "transaction unmined; replaced with a higher fee",
    );
    await options.faults?.afterReplace?.(recorded);
    const sent = await broadcastRaw(client, raw);
    if (sent.kind === "underpriced") {
      // Below the block's base fee even at this bump: the earlier transaction is still pending.
      if (fees.maxFeePerGas === options.maxFeePerGas) await holdForFee(recorded);
    } else if (sent.kind === "refused") {
      // The earlier transaction is still pending (or mined): keep waiting on all of them.
      log.warn({ id: row.id, reason: sent.message }, "the node refused the replacement; waiting");
    } else if (options.maxFeePerGas === undefined || fees.maxFeePerGas < options.maxFeePerGas) {
      // The bump fit under the ceiling with room to spare: nothing holds it.
      options.feeHold.release(row.id);
    }
    return recorded;
  }

  /**
   * The receipt of a transaction just broadcast, looked for at the short delays of `receiptPollsMs`;
   * `undefined` when none of those looks found it (or the node failed one: the wait on new blocks
   * deals with that). The broadcast is recorded (`record`) once the first look missed, while the looks
   * go on, and in any case before `undefined` is returned: a transaction a node mined at once goes from
   * `signed` to its outcome with no write in between. A failed record is thrown when no receipt was
   * found; when one was, the outcome's own write follows (and the row is open either way).
   */
  async function earlyReceipt(
    hash: Hash,
    record: () => Promise<void>,
  ): Promise<TransactionReceipt | undefined> {
    let recording: Promise<void> | undefined;
    const recordOnce = () => {
      if (recording === undefined) {
        recording = record();
        recording.catch(() => undefined);
      }
      return recording;
    };
    const polls = confirmations > 1 ? [] : options.receiptPollsMs;
    for (const delay of polls) {
      if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
      try {
        return await client.getTransactionReceipt({ hash });
      } catch (error) {
        if (!(error instanceof TransactionReceiptNotFoundError)) break;
      }
      void recordOnce();
    }
    await recordOnce();
    return undefined;
  }

  /** Waits for a receipt of any of the row's transactions, replacing it while it sits unmined. */
  async function awaitReceipt(first: OutboxRow): Promise<{ row: OutboxRow; receipt: TransactionReceipt }> {
    let row = first;
    for (;;) {
      const timeout = options.bumpAfterMs === false ? options.receiptTimeoutMs : options.bumpAfterMs;
      try {
        const receipt = await client.waitForTransactionReceipt({
          hash: row.tx_hash!,
          confirmations,
          timeout,
          onReplaced: () => undefined,
        });
        return { row, receipt };
      } catch (error) {
        if (options.bumpAfterMs === false || !(error instanceof WaitForTransactionReceiptTimeoutError)) {
          throw error;
        }
      }
      // An earlier transaction of the row may be the one mined (the wait follows the latest hash).
      const mined = await findRowReceipt(client, row);
      if (mined !== undefined) {
        const receipt =
          confirmations > 1
            ? await client.waitForTransactionReceipt({
                hash: mined.transactionHash,
                confirmations,
                timeout: options.receiptTimeoutMs,
                onReplaced: () => undefined,
              })
            : mined;
        return { row, receipt };
      }
      row = await replace(row);
      if (row.status !== "signed" && row.status !== "broadcast") {
        // Another worker recorded its outcome meanwhile.
        const receipt = await findRowReceipt(client, row);
        if (receipt !== undefined) return { row, receipt };
        throw new TollgateError("Internal", `outbox row ${row.id} ended elsewhere without a receipt`);
      }
    }
  }

  async function drive(row: OutboxRow, fresh: boolean): Promise<void> {
    if (row.raw_tx === null || row.tx_hash === null)
      throw new TollgateError("Internal", "an open outbox row has no transaction");
    if (fresh) await options.faults?.afterSign?.(row);
    else {
      const receipt = await findRowReceipt(client, row);
      if (receipt !== undefined) return finish(row, outcomeOf(row, receipt));
    }
    const sent = await broadcastRaw(client, row.raw_tx);
    if (sent.kind === "nonce-used") {
      const receipt = await findRowReceipt(client, row);
      if (receipt !== undefined) return finish(row, outcomeOf(row, receipt));
      key.nonces.resync();
      return finish(row, {
        ...outcomeBase(row),
        status: "dropped",
        reason: "displaced",
        message: "another transaction took this transaction's account nonce",
        hash: null,
      });
    }
    if (sent.kind === "underpriced") {
      // Its fee is below the block's base fee now: it waits (and bumps, up to the ceiling), never dropped.
      log.debug({ id: row.id, reason: sent.message }, "transaction below the base fee; waiting");
      if (row.raw_tx !== null && parseTransaction(row.raw_tx).maxFeePerGas === options.maxFeePerGas)
        await holdForFee(row);
    } else if (sent.kind === "refused") {
      // A row replaced before (a crash after its replacement was recorded): an earlier transaction may
      // still be pending, so the refusal of these bytes does not drop it.
      if (row.replaced_hashes.length === 0) return refuse(row, sent.message);
      log.warn({ id: row.id, reason: sent.message }, "the node refused a replaced transaction; waiting");
    }
    options.hashWaiters.settle(row.id, (w) =>
      w.resolve({ id: row.id, hash: row.tx_hash!, nonce: row.nonce! }),
    );
    await options.faults?.afterBroadcast?.(row);
    const early = await earlyReceipt(row.tx_hash, () => markBroadcast(store, row.id));
    if (early !== undefined) return finish(row, outcomeOf(row, early));
    const { row: latest, receipt } = await awaitReceipt(row);
    return finish(latest, outcomeOf(latest, receipt));
  }

  return {
    drive,
    recent: (id) => recent.get(id),
    lastSeenBlock: () => lastSeenBlock,
  };
}
