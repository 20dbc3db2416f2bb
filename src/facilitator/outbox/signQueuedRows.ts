/**
 * Signing: queued rows are claimed (`FOR UPDATE SKIP LOCKED`), given nonces while the gas key's
 * `tx_senders` row is locked, signed, and their raw bytes and hashes recorded — all in one store
 * transaction, so a nonce is never handed out without its transaction recorded, nor twice.
 */
import { type Address, keccak256 } from "viem";
import type { Store } from "../../store/store.ts";
import type { GasKey } from "./gasKey.ts";
import {
  claimQueuedRows,
  hasQueuedRows,
  lockNextNonce,
  markSigned,
  type OutboxRow,
  storeNextNonce,
} from "./outboxRecords.ts";

export async function signQueuedRows(deps: {
  store: Store;
  key: GasKey;
  scope: { chainId: number; sender: Address };
  kinds: readonly string[];
  limit: number;
  /** A block at or before the one the rows can land in. */
  fromBlock: () => Promise<bigint>;
  /** A producer has just said rows were committed: no need to look whether any is queued first. */
  knownQueued?: boolean;
}): Promise<OutboxRow[]> {
  const { store, key, scope, kinds } = deps;
  // Look before reading the chain: an idle pass costs one indexed query and no RPC call. A pass a
  // producer asked for skips the look; if another worker took its rows, the claim below finds none.
  if (deps.knownQueued !== true && !(await hasQueuedRows(store, scope, kinds))) return [];
  const floor = await key.nonces.floor();
  const fees = await key.fees();
  const fromBlock = await deps.fromBlock();
  try {
    return await store.transaction(async (tx) => {
      const claimed = await claimQueuedRows(tx, scope, kinds, deps.limit);
      if (claimed.length === 0) return [];
      let next = await lockNextNonce(tx, scope, floor);
      const signed: OutboxRow[] = [];
      for (const row of claimed.sort((a, b) => a.id - b.id)) {
        const nonce = key.nonces.take(next);
        const raw = await key.sign(
          { to: row.to_address, data: row.data, gas: row.gas_limit, nonce, value: row.value },
          fees,
        );
        const hash = keccak256(raw);
        await markSigned(tx, row.id, { nonce, hash, raw, fromBlock });
        signed.push({ ...row, status: "signed", nonce, tx_hash: hash, raw_tx: raw, from_block: fromBlock });
        next = nonce + 1;
      }
      await storeNextNonce(tx, scope, next);
      return signed;
    });
  } catch (error) {
    // Nonces taken in this process for a transaction that rolled back must be taken again.
    key.nonces.resync();
    throw error;
  }
}
