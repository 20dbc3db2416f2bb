/**
 * Batches recorded by an older version (signed into `settlement_batches` itself, before the outbox):
 * their transaction is adopted by the outbox as it was signed, never signed again; unsigned ones
 * release their payments to the queue. Another gas key's signed batch is left to its own facilitator.
 */
import { type Address, type Hex, keccak256, parseTransaction } from "viem";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import { insertSignedRow } from "../outbox/outboxRecords.ts";
import type { Outbox } from "../outbox/outboxTypes.ts";
import { BatchRowSchema } from "../paymentRecords.ts";
import { SETTLEMENT_KIND } from "./batchClaims.ts";

export async function adoptLegacyBatches(deps: {
  store: Store;
  outbox: Pick<Outbox, "sender">;
  network: string;
  chainId: number;
}): Promise<void> {
  const { store, outbox } = deps;
  const legacy = await queryParsed(
    store,
    BatchRowSchema,
    `SELECT * FROM settlement_batches WHERE status IN ('pending', 'submitted') AND network = $1 AND outbox_id IS NULL`,
    [deps.network],
  );
  for (const batch of legacy) {
    await store.transaction(async (tx) => {
      if (
        batch.raw_tx === null ||
        batch.sender_nonce === null ||
        batch.sender !== outbox.sender.toLowerCase()
      ) {
        if (batch.raw_tx !== null) return; // another gas key's batch: its own facilitator adopts it
        await tx.query(
          "UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now() WHERE batch_id = $1 AND status = 'submitted'",
          [batch.id],
        );
        await tx.query("UPDATE settlement_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
          batch.id,
        ]);
        return;
      }
      const raw = batch.raw_tx as Hex;
      const parsed = parseTransaction(raw);
      const id = await insertSignedRow(
        tx,
        { chainId: deps.chainId, sender: outbox.sender },
        {
          kind: SETTLEMENT_KIND,
          owner: String(batch.id),
          to: parsed.to as Address,
          data: parsed.data ?? "0x",
          gas: parsed.gas ?? 0n,
          nonce: batch.sender_nonce,
          hash: keccak256(raw),
          raw,
          fromBlock: null,
        },
      );
      await tx.query("UPDATE settlement_batches SET outbox_id = $2 WHERE id = $1", [batch.id, id]);
    });
  }
}
