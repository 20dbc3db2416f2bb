/**
 * Replacing a row's transaction that sits unmined (rowDriver.ts): the same call at the same nonce with
 * fees at least 12.5 % above the previous ones and at least what the chain asks now, never above the
 * ceiling; recorded before it is broadcast (createOutbox.ts, invariants 1 and 2). A row whose bump
 * would pass the ceiling waits in the fee hold (feeHold.ts) and is offered again as it is.
 */
import { parseTransaction } from "viem";
import { transactionHashOf } from "../../chain/signers/eip1559Encoding.ts";
import { broadcastRaw } from "./broadcastRaw.ts";
import type { GasFees } from "./gasKey.ts";
import { findOutboxRow, type OutboxRow, recordReplacement } from "./outboxRecords.ts";
import type { RowDriverOptions } from "./rowDriverTypes.ts";

/** Nodes take a replacement at 10 % above the fees it replaces (geth); 12.5 % leaves room. */
function bumped(fee: bigint): bigint {
  return fee + (fee + 7n) / 8n;
}

/** The larger of two fees (bigints: no `Math.max`). */
function larger(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/**
 * The fees a replacement of `raw` offers, or `undefined` when they would pass the ceiling. Both are
 * at least 12.5 % above the replaced ones (a node refuses less) and at least what the chain asks now
 * (`key.fees`, itself capped at the ceiling), so the last bump before the ceiling lands on it.
 */
async function replacementFees(options: RowDriverOptions, raw: `0x${string}`): Promise<GasFees | undefined> {
  const signed = parseTransaction(raw);
  const now = await options.key.fees({ fresh: true });
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
export async function holdForFee(options: RowDriverOptions, row: OutboxRow): Promise<void> {
  if (options.maxFeePerGas === undefined) return;
  const baseFee = await options.key.baseFee().catch(() => undefined);
  options.feeHold.hold(row.id, baseFee);
}

/** The bump would pass the ceiling: the row waits, and its bytes are offered again as they are. */
async function waitUnderCeiling(
  options: RowDriverOptions,
  row: OutboxRow,
  raw: `0x${string}`,
): Promise<void> {
  const log = options.logger;
  log.debug(
    { id: row.id, kind: row.kind, nonce: row.nonce, ceiling: options.maxFeePerGas?.toString() },
    "transaction unmined and its fee at the ceiling; waiting",
  );
  await holdForFee(options, row);
  // The node may have refused these bytes as below the base fee, or dropped them: offer them again,
  // so they are mined as soon as the base fee falls under them.
  const again = await broadcastRaw(options.client, raw);
  if (again.kind === "refused") log.debug({ id: row.id, reason: again.message }, "broadcast again: refused");
}

/**
 * Replaces the row's transaction with the same call at the same nonce and higher fees: recorded,
 * then broadcast. Returns the row as it stands now (another worker's replacement, if it won).
 */
export async function replaceRow(options: RowDriverOptions, row: OutboxRow): Promise<OutboxRow> {
  const { key, store, logger: log } = options;
  if (row.raw_tx === null || row.tx_hash === null || row.nonce === null) return row;
  const fees = await replacementFees(options, row.raw_tx);
  if (fees === undefined) {
    await waitUnderCeiling(options, row, row.raw_tx);
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
  const sent = await broadcastRaw(options.client, raw);
  if (sent.kind === "underpriced") {
    // Below the block's base fee even at this bump: the earlier transaction is still pending.
    if (fees.maxFeePerGas === options.maxFeePerGas) await holdForFee(options, recorded);
  } else if (sent.kind === "refused") {
    // The earlier transaction is still pending (or mined): keep waiting on all of them.
    log.warn({ id: row.id, reason: sent.message }, "the node refused the replacement; waiting");
  } else if (options.maxFeePerGas === undefined || fees.maxFeePerGas < options.maxFeePerGas) {
    // The bump fit under the ceiling with room to spare: nothing holds it.
    options.feeHold.release(row.id);
  }
  return recorded;
}
