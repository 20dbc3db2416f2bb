/**
 * The facilitator's gas account: one key that pays for settlement batches, relayed subscription calls,
 * renewals and usage deductions. Every transaction from it takes its account nonce here, so the
 * settlement engine's pipelined batches and the other workers never race for the same nonce.
 *
 * Invariant: a nonce handed out is either used by a broadcast transaction or, when the broadcast is
 * refused, filled by a zero-value self-transfer, so no later transaction waits behind a gap.
 */

import type { Logger } from "pino";
import type { Address, Hash, Hex, LocalAccount, PublicClient } from "viem";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { isChainUnreachable, toChainError } from "./chainErrors.ts";

export type GasClient = Pick<
  PublicClient,
  | "getTransactionCount"
  | "estimateFeesPerGas"
  | "estimateGas"
  | "sendRawTransaction"
  | "waitForTransactionReceipt"
>;

export type GasAccount = {
  readonly address: Address;
  readonly account: LocalAccount;
  /** The next account nonce (read from the chain the first time and after `resync`). */
  takeNonce(): Promise<number>;
  /** Forget the local nonce; the next `takeNonce` reads the chain's pending count. */
  resync(): void;
  fees(): Promise<{ maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }>;
  /** Signs with an explicit nonce, for callers that record the transaction before broadcasting. */
  sign(request: { to: Address; data: Hex; gas: bigint; nonce: number }): Promise<Hex>;
  /**
   * Estimates, signs and broadcasts a call, returning its hash once broadcast. A call that would revert
   * is refused by the estimate before a nonce is taken (as a `TollgateError` from the revert).
   */
  send(request: { to: Address; data: Hex }): Promise<Hash>;
  /** `send`, then waits for the receipt; throws if the transaction reverted. */
  sendAndWait(request: {
    to: Address;
    data: Hex;
  }): Promise<{ hash: Hash; blockNumber: bigint; logs: readonly unknown[] }>;
};

const FEE_CACHE_MS = 3_000;

export function createGasAccount(options: {
  account: LocalAccount;
  client: GasClient;
  chainId: number;
  clock: Clock;
  logger: Logger;
}): GasAccount {
  const { account, client, clock, chainId } = options;
  let next: number | undefined;
  let loading: Promise<number> | undefined;
  let cachedFees: { at: number; maxFeePerGas: bigint; maxPriorityFeePerGas: bigint } | undefined;

  async function takeNonce(): Promise<number> {
    if (next === undefined) {
      loading ??= client
        .getTransactionCount({ address: account.address, blockTag: "pending" })
        .finally(() => {
          loading = undefined;
        });
      const loaded = await loading;
      // Several callers may have awaited the same read: only the first sets the counter.
      if (next === undefined) next = loaded;
    }
    const nonce = next;
    next = nonce + 1;
    return nonce;
  }

  async function fees() {
    if (cachedFees !== undefined && clock.now() - cachedFees.at < FEE_CACHE_MS) return cachedFees;
    const estimate = await client.estimateFeesPerGas();
    cachedFees = {
      at: clock.now(),
      // Headroom so a transaction survives a few blocks of base-fee rise.
      maxFeePerGas: (estimate.maxFeePerGas ?? 0n) * 2n,
      maxPriorityFeePerGas: estimate.maxPriorityFeePerGas ?? 0n,
    };
    return cachedFees;
  }

  async function sign(request: {
    to: Address;
    data: Hex;
    gas: bigint;
    nonce: number;
    value?: bigint;
  }): Promise<Hex> {
    const { maxFeePerGas, maxPriorityFeePerGas } = await fees();
    return account.signTransaction({
      type: "eip1559",
      chainId,
      to: request.to,
      data: request.data,
      gas: request.gas,
      nonce: request.nonce,
      maxFeePerGas,
      maxPriorityFeePerGas,
      value: request.value ?? 0n,
    });
  }

  /** Uses up a nonce whose transaction could not be broadcast, so later ones are not stuck behind it. */
  async function fillGap(nonce: number): Promise<void> {
    try {
      const raw = await sign({ to: account.address, data: "0x", gas: 21_000n, nonce });
      await client.sendRawTransaction({ serializedTransaction: raw });
    } catch (error) {
      options.logger.warn({ err: error, nonce }, "could not fill a nonce gap; resyncing");
      next = undefined;
    }
  }

  async function send(request: { to: Address; data: Hex }): Promise<Hash> {
    let gas: bigint;
    try {
      gas = await client.estimateGas({ account: account.address, to: request.to, data: request.data });
    } catch (error) {
      throw toChainError(error);
    }
    const nonce = await takeNonce();
    let raw: Hex;
    try {
      raw = await sign({ ...request, gas: (gas * 12n) / 10n, nonce });
      return await client.sendRawTransaction({ serializedTransaction: raw });
    } catch (error) {
      if (isChainUnreachable(error)) {
        // The chain may or may not have it; read the nonce again when it is back.
        next = undefined;
      } else {
        await fillGap(nonce);
      }
      throw toChainError(error);
    }
  }

  return {
    address: account.address,
    account,
    takeNonce,
    resync() {
      next = undefined;
    },
    fees,
    sign,
    send,
    async sendAndWait(request) {
      const hash = await send(request);
      const receipt = await client.waitForTransactionReceipt({ hash, timeout: 120_000 });
      if (receipt.status !== "success") {
        // The estimate passed a moment ago, so the state changed under it: worth retrying.
        throw new TollgateError("ChainUnavailable", `transaction ${hash} reverted on chain; try again`, {
          retryAfter: 1,
          details: { transaction: hash },
        });
      }
      return { hash, blockNumber: receipt.blockNumber, logs: receipt.logs };
    },
  };
}
