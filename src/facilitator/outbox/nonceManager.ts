/**
 * The in-process half of a gas key's nonce manager; the store's `tx_senders` row is the shared half
 * (outboxRecords.ts `lockNextNonce`). A nonce is taken only while that row is locked, as
 * max(the store's next nonce, the chain's pending count, one above the last nonce taken in this process),
 * so neither instances sharing a database nor outboxes over different stores in one process (tests do
 * that) hand out a nonce twice.
 */
import type { Address, PublicClient } from "viem";

export type NonceClient = Pick<PublicClient, "getTransactionCount">;

export type NonceManager = {
  /** The chain's pending transaction count, read the first time and after `resync`. */
  floor(): Promise<number>;
  /** Takes the next nonce at or above `atLeast` (and the floor last read); synchronous, so atomic. */
  take(atLeast: number): number;
  /** Forgets the chain's count (a transaction was displaced, or a signing transaction rolled back). */
  resync(): void;
};

export function createNonceManager(options: { address: Address; client: NonceClient }): NonceManager {
  let chainFloor: number | undefined;
  let loading: Promise<number> | undefined;
  let next = 0;
  return {
    async floor() {
      if (chainFloor !== undefined) return chainFloor;
      loading ??= options.client
        .getTransactionCount({ address: options.address, blockTag: "pending" })
        .finally(() => {
          loading = undefined;
        });
      chainFloor = await loading;
      return chainFloor;
    },
    take(atLeast) {
      const nonce = Math.max(atLeast, chainFloor ?? 0, next);
      next = nonce + 1;
      return nonce;
    },
    resync() {
      chainFloor = undefined;
      next = 0;
    },
  };
}
