/**
 * An outbox row's outcome as the chain tells it: a receipt for any hash the row was signed under, turned
 * into the outcome its handler receives.
 */
import { type PublicClient, type TransactionReceipt, TransactionReceiptNotFoundError } from "viem";
import { TollgateError } from "../../protocol/errors.ts";
import { isChainUnreachable } from "../chainErrors.ts";
import type { OutboxRow } from "./outboxRecords.ts";
import type { OutboxOutcome } from "./outboxTypes.ts";

/** The receipt of the row's transaction (or of one it replaced); `undefined` when none is mined. */
export async function findRowReceipt(
  client: Pick<PublicClient, "getTransactionReceipt">,
  row: OutboxRow,
): Promise<TransactionReceipt | undefined> {
  for (const hash of [row.tx_hash, ...row.replaced_hashes]) {
    if (hash === null) continue;
    try {
      return await client.getTransactionReceipt({ hash });
    } catch (error) {
      if (error instanceof TransactionReceiptNotFoundError || !isChainUnreachable(error)) continue;
      throw error;
    }
  }
  return undefined;
}

/** What every outcome of the row says of it. */
export function outcomeBase(row: OutboxRow) {
  return { id: row.id, kind: row.kind, owner: row.owner, meta: row.meta, fromBlock: row.from_block };
}

export function receiptOutcome(row: OutboxRow, receipt: TransactionReceipt): OutboxOutcome {
  const feePaid = feePaidOf(receipt);
  return receipt.status === "success"
    ? {
        ...outcomeBase(row),
        feePaid,
        status: "confirmed",
        hash: receipt.transactionHash,
        blockNumber: receipt.blockNumber,
        blockHash: receipt.blockHash,
        logs: receipt.logs,
      }
    : {
        ...outcomeBase(row),
        feePaid,
        status: "reverted",
        hash: receipt.transactionHash,
        blockNumber: receipt.blockNumber,
        blockHash: receipt.blockHash,
      };
}

/**
 * What a mined transaction cost its sender, in wei: `gasUsed × effectiveGasPrice`, plus the L1 data fee
 * an OP Stack chain (Base) charges beside it (`l1Fee`, which viem's OP Stack formatter reads). A reverted
 * transaction costs the same way.
 */
export function feePaidOf(receipt: TransactionReceipt): bigint {
  const l1Fee = (receipt as { l1Fee?: bigint | null }).l1Fee;
  return receipt.gasUsed * receipt.effectiveGasPrice + (typeof l1Fee === "bigint" ? l1Fee : 0n);
}

/** The outcome recorded for a final row (its receipt read again); `undefined` while the row is open. */
export async function recordedOutcome(
  client: Pick<PublicClient, "getTransactionReceipt">,
  row: OutboxRow,
): Promise<OutboxOutcome | undefined> {
  if (row.status === "dropped") {
    const [reason, ...rest] = (row.failure ?? "refused: ").split(": ");
    return {
      ...outcomeBase(row),
      status: "dropped",
      reason: reason === "displaced" ? "displaced" : "refused",
      message: rest.join(": "),
      hash: null,
    };
  }
  if (row.status !== "confirmed" && row.status !== "reverted") return undefined;
  const receipt = await findRowReceipt(client, row);
  if (receipt === undefined)
    throw new TollgateError("ChainUnavailable", "the recorded transaction has no receipt");
  return receiptOutcome(row, receipt);
}
