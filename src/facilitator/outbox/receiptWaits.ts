/**
 * A row driver's waits for a receipt (rowDriver.ts): the short looks right after a broadcast, and the
 * wait on new blocks that replaces the row with a higher fee while it sits unmined (feeBump.ts).
 * Whichever of the row's transactions is mined is its outcome.
 */
import {
  type Hash,
  type TransactionReceipt,
  TransactionReceiptNotFoundError,
  WaitForTransactionReceiptTimeoutError,
} from "viem";
import { TollgateError } from "../../protocol/errors.ts";
import { replaceRow } from "./feeBump.ts";
import type { OutboxRow } from "./outboxRecords.ts";
import type { RowDriverOptions } from "./rowDriverTypes.ts";
import { findRowReceipt } from "./rowReceipts.ts";

/**
 * The receipt of a transaction just broadcast, looked for at the short delays of `receiptPollsMs`;
 * `undefined` when none of those looks found it (or the node failed one: the wait on new blocks
 * deals with that). The broadcast is recorded (`record`) once the first look missed, while the looks
 * go on, and in any case before `undefined` is returned: a transaction a node mined at once goes from
 * `signed` to its outcome with no write in between. A failed record is thrown when no receipt was
 * found; when one was, the outcome's own write follows (and the row is open either way).
 */
export async function earlyReceipt(
  options: RowDriverOptions,
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
  const polls = options.confirmations > 1 ? [] : options.receiptPollsMs;
  for (const delay of polls) {
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    try {
      return await options.client.getTransactionReceipt({ hash });
    } catch (error) {
      if (!(error instanceof TransactionReceiptNotFoundError)) break;
    }
    void recordOnce();
  }
  await recordOnce();
  return undefined;
}

/** Waits for a receipt of any of the row's transactions, replacing it while it sits unmined. */
export async function awaitReceipt(
  options: RowDriverOptions,
  first: OutboxRow,
): Promise<{ row: OutboxRow; receipt: TransactionReceipt }> {
  const { client, confirmations } = options;
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
    if (mined !== undefined) return { row, receipt: await confirmed(options, mined) };
    row = await replaceRow(options, row);
    if (row.status !== "signed" && row.status !== "broadcast") {
      // Another worker recorded its outcome meanwhile.
      const receipt = await findRowReceipt(client, row);
      if (receipt !== undefined) return { row, receipt };
      throw new TollgateError("Internal", `outbox row ${row.id} ended elsewhere without a receipt`);
    }
  }
}

/** The receipt once it has the confirmations asked for. */
async function confirmed(options: RowDriverOptions, mined: TransactionReceipt): Promise<TransactionReceipt> {
  if (options.confirmations <= 1) return mined;
  return options.client.waitForTransactionReceipt({
    hash: mined.transactionHash,
    confirmations: options.confirmations,
    timeout: options.receiptTimeoutMs,
    onReplaced: () => undefined,
  });
}
