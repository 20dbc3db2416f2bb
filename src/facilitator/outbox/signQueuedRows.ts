/**
 * Signing: queued rows are claimed (`FOR UPDATE SKIP LOCKED`), given nonces while the gas key's
 * `tx_senders` row is locked, signed, and their raw bytes and hashes recorded — all in one store
 * transaction, so a nonce is never handed out without its transaction recorded, nor twice.
 *
 * A producer may instead have its calls signed in its own transaction (`signInTransaction`, the outbox's
 * `signingTransaction`): the same steps, with its rows, in its commit.
 */
import type { Address } from "viem";
import { transactionHashOf } from "../../chain/signers/eip1559Encoding.ts";
import type { Queryable, Store } from "../../store/store.ts";
import type { GasFees, GasKey } from "./gasKey.ts";
import {
  claimQueuedRows,
  hasQueuedRows,
  insertSignedTakingNonce,
  lockNextNonce,
  markSigned,
  type OutboxRow,
  storeNextNonce,
} from "./outboxRecords.ts";
import type { OutboxRequest } from "./outboxTypes.ts";

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
        const hash = transactionHashOf(raw);
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

/**
 * Runs `work` in one store transaction in which `enqueue` signs each call at once: the first call locks
 * the gas key's `tx_senders` row and takes the next nonce (as a signing pass does), each is signed and
 * inserted `signed` with the next nonce stored by the same statement. Resolves with `work`'s result and
 * the rows signed, once committed; when the transaction fails, the nonces taken in this process are given
 * back (`resync`) and the error is thrown.
 */
export async function signInTransaction<T>(
  deps: {
    store: Store;
    key: GasKey;
    scope: { chainId: number; sender: Address };
    /** Checks a request before anything is signed (its kind has a handler). */
    check: (request: OutboxRequest) => void;
    /** A block at or before the one the rows can land in. */
    fromBlock: () => Promise<bigint>;
  },
  work: (tx: Queryable, enqueue: (request: OutboxRequest) => Promise<number>) => Promise<T>,
): Promise<{ result: T; signed: OutboxRow[] }> {
  const { store, key, scope } = deps;
  // Read before the transaction opens (each is cached): no RPC call while the producer's rows are locked.
  const floor = await key.nonces.floor();
  const fees: GasFees = await key.fees();
  const fromBlock = await deps.fromBlock();
  let took = false;
  try {
    return await store.transaction(async (tx) => {
      const signed: OutboxRow[] = [];
      let next: number | undefined;
      const signOne = async (request: OutboxRequest): Promise<number> => {
        deps.check(request);
        next ??= await lockNextNonce(tx, scope, floor);
        took = true;
        const nonce = key.nonces.take(next);
        next = nonce + 1;
        const raw = await key.sign(
          { to: request.to, data: request.data, gas: request.gas, nonce, value: request.value },
          fees,
        );
        const row = await insertSignedTakingNonce(tx, scope, {
          ...request,
          nonce,
          hash: transactionHashOf(raw),
          raw,
          fromBlock,
        });
        signed.push(row);
        return row.id;
      };
      // One call at a time, in the order they were made, whatever `work` awaits.
      let queue: Promise<unknown> = Promise.resolve();
      const enqueue = (request: OutboxRequest): Promise<number> => {
        const run = queue.then(() => signOne(request));
        queue = run.catch(() => undefined);
        return run;
      };
      const result = await work(tx, enqueue);
      // A call `work` did not wait for is signed before the commit. Each row's insert stored the nonce
      // after its own, so nothing more is written.
      await queue;
      return { result, signed };
    });
  } catch (error) {
    if (took) key.nonces.resync();
    throw error;
  }
}
