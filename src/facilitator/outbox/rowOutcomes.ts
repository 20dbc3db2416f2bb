/**
 * The outcomes a row driver records (rowDriver.ts): delivered to the row's handler in its store
 * transaction (deliverOutcome.ts), then its waiters woken; and the refusal of a row's bytes for good,
 * which drops the row and fills its nonce with a zero-value transfer to self, signed and recorded in
 * the same store transaction as the outcome (createOutbox.ts, invariant 3).
 */
import type { TransactionReceipt } from "viem";
import { transactionHashOf } from "../../chain/signers/eip1559Encoding.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import { deliverOutcome } from "./deliverOutcome.ts";
import { findOutboxRow, insertSignedRow, type OutboxRow } from "./outboxRecords.ts";
import type { OutboxOutcome } from "./outboxTypes.ts";
import type { RowDriverOptions } from "./rowDriverTypes.ts";
import { outcomeBase, receiptOutcome } from "./rowReceipts.ts";

/** The kind of zero-value transfers that fill a nonce whose transaction the node refused. */
export const FILLER_KIND = "nonce-filler";

/** Outcomes recorded here lately are kept for `waitFor`, up to this many. */
const RECENT_OUTCOMES = 1_000;

export class RowOutcomes {
  readonly #options: RowDriverOptions;
  /** The highest block a receipt has shown: a lower bound for the block a new row lands in. */
  lastSeenBlock: bigint | undefined;
  /** Outcomes recorded here lately, so `waitFor` needs no receipt lookup for them. */
  readonly recent = new Map<number, OutboxOutcome>();

  constructor(options: RowDriverOptions) {
    this.#options = options;
  }

  /** The outcome a receipt of the row gives; keeps `lastSeenBlock`. */
  outcomeOf(row: OutboxRow, receipt: TransactionReceipt): OutboxOutcome {
    if (this.lastSeenBlock === undefined || receipt.blockNumber > this.lastSeenBlock)
      this.lastSeenBlock = receipt.blockNumber;
    return receiptOutcome(row, receipt);
  }

  /** Delivers an outcome to the row's handler (deliverOutcome.ts) and wakes its waiters. */
  async finish(
    row: OutboxRow,
    outcome: OutboxOutcome,
    alsoInTx?: (db: Queryable) => Promise<void>,
  ): Promise<void> {
    const options = this.#options;
    const handler = options.handlers.get(row.kind);
    if (handler === undefined) throw new TollgateError("Internal", `no outbox handler for kind ${row.kind}`);
    await deliverOutcome(options.store, handler, row, outcome, alsoInTx);
    options.feeHold.release(row.id);
    options.onOutcome?.(outcome);
    this.recent.set(row.id, outcome);
    if (this.recent.size > RECENT_OUTCOMES) this.recent.delete(this.recent.keys().next().value as number);
    options.outcomeWaiters.settle(row.id, (w) => w.resolve(outcome));
  }

  /** The node refused the row's bytes for good: drop it and fill its nonce so later rows can be mined. */
  async refuse(row: OutboxRow, message: string): Promise<void> {
    const { key, logger: log, scope, store } = this.#options;
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
      return this.finish(row, outcome);
    }
    const nonce = row.nonce;
    const raw = await key.sign({ to: key.address, data: "0x", gas: 21_000n, nonce }, await key.fees());
    let fillerId = 0;
    await this.finish(row, outcome, async (tx) => {
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
    if (filler !== undefined) this.#options.track(filler, true);
  }
}
