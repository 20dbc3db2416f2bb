/**
 * The facilitator's gas account: one key that pays for settlement batches, relayed subscription calls,
 * renewals, usage deductions and channel claims.
 *
 * - `GasKey` signs: it holds the account, the in-process nonce manager (outbox/nonceManager.ts) and a
 *   short fee cache. Only the transaction outbox (outbox/createOutbox.ts) takes nonces and signs, so
 *   every transaction of the key is recorded before it is broadcast and no two share a nonce.
 * - `GasAccount` adds `send`/`sendAndWait` for one-off relayed calls; they go through the same outbox
 *   (kind `relay`), so a relayed call survives a crash like a settlement batch does.
 */

import type { Logger } from "pino";
import type { Address, Hash, Hex, Log, PublicClient } from "viem";
import { TollgateError } from "../protocol/errors.ts";
import { toChainError } from "./chainErrors.ts";
import type { GasKey } from "./outbox/gasKey.ts";
import type { Outbox } from "./outbox/outboxTypes.ts";

export type { GasKey } from "./outbox/gasKey.ts";

export type GasAccount = GasKey & {
  /**
   * Estimates a call, queues it in the outbox and resolves with its hash once broadcast. A call that
   * would revert is refused by the estimate before anything is queued (a `TollgateError` from the revert).
   */
  send(request: { to: Address; data: Hex }): Promise<Hash>;
  /** `send`, then waits for the outcome; throws if the transaction reverted or never made it. */
  sendAndWait(request: {
    to: Address;
    data: Hex;
  }): Promise<{ hash: Hash; blockNumber: bigint; logs: readonly Log[] }>;
};

/** The outbox kind of relayed one-off calls. */
export const RELAY_KIND = "relay";

/** Adds relayed one-off calls, sent through `outbox`, to a gas key. */
export function createGasAccount(options: {
  key: GasKey;
  outbox: Outbox;
  client: Pick<PublicClient, "estimateGas">;
  logger: Logger;
}): GasAccount {
  const { key, outbox, client } = options;
  options.outbox.handle(RELAY_KIND, async () => {
    // The caller waits on the outcome itself; nothing to record.
  });

  async function enqueue(request: { to: Address; data: Hex }): Promise<number> {
    let gas: bigint;
    try {
      gas = await client.estimateGas({ account: key.address, to: request.to, data: request.data });
    } catch (error) {
      throw toChainError(error);
    }
    const id = await outbox.enqueue(outbox.store, {
      kind: RELAY_KIND,
      owner: request.to.toLowerCase(),
      to: request.to,
      data: request.data,
      gas: (gas * 12n) / 10n,
    });
    outbox.wake();
    return id;
  }

  return {
    ...key,
    async send(request) {
      const id = await enqueue(request);
      return (await outbox.waitForHash(id)).hash;
    },
    async sendAndWait(request) {
      const id = await enqueue(request);
      const outcome = await outbox.waitFor(id);
      if (outcome.status === "confirmed") {
        return { hash: outcome.hash, blockNumber: outcome.blockNumber, logs: outcome.logs };
      }
      // The estimate passed a moment ago, so the state changed under it: worth retrying.
      throw new TollgateError(
        "ChainUnavailable",
        outcome.status === "reverted"
          ? `transaction ${outcome.hash} reverted on chain; try again`
          : `the transaction was not mined (${outcome.message}); try again`,
        { retryAfter: 1, details: { ...(outcome.hash === null ? {} : { transaction: outcome.hash }) } },
      );
    },
  };
}
