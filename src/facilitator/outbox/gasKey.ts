/**
 * The gas account's signing half: the key, its in-process nonce manager (nonceManager.ts) and a short
 * fee cache. Only the transaction outbox signs with it, so every transaction of the key is recorded
 * before it is broadcast and no two share a nonce.
 */
import type { Address, Hex, LocalAccount, PublicClient } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import { createNonceManager, type NonceManager } from "./nonceManager.ts";

export type GasKeyClient = Pick<PublicClient, "getTransactionCount" | "estimateFeesPerGas">;

export type GasFees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };

export type GasKey = {
  readonly address: Address;
  readonly account: LocalAccount;
  readonly chainId: number;
  /** The in-process nonce manager of this key; the outbox takes nonces through it. */
  readonly nonces: NonceManager;
  /**
   * Fees for a new transaction (cached for a few seconds, with headroom for a rising base fee);
   * `fresh` reads the chain now (a fee bump).
   */
  fees(options?: { fresh?: boolean }): Promise<GasFees>;
  /** Signs an EIP-1559 transaction with an explicit nonce; nothing is sent. */
  sign(
    request: { to: Address; data: Hex; gas: bigint; nonce: number; value?: bigint | undefined },
    fees: GasFees,
  ): Promise<Hex>;
};

const FEE_CACHE_MS = 3_000;

export function createGasKey(options: {
  account: LocalAccount;
  client: GasKeyClient;
  chainId: number;
  clock: Clock;
}): GasKey {
  const { account, client, clock, chainId } = options;
  let cachedFees: (GasFees & { at: number }) | undefined;
  return {
    address: account.address,
    account,
    chainId,
    nonces: createNonceManager({ address: account.address, client }),
    async fees(options) {
      if (options?.fresh !== true && cachedFees !== undefined && clock.now() - cachedFees.at < FEE_CACHE_MS) {
        return cachedFees;
      }
      const estimate = await client.estimateFeesPerGas();
      cachedFees = {
        at: clock.now(),
        // Headroom so a transaction survives a few blocks of base-fee rise.
        maxFeePerGas: (estimate.maxFeePerGas ?? 0n) * 2n,
        maxPriorityFeePerGas: estimate.maxPriorityFeePerGas ?? 0n,
      };
      return cachedFees;
    },
    sign(request, fees) {
      return account.signTransaction({
        type: "eip1559",
        chainId,
        to: request.to,
        data: request.data,
        gas: request.gas,
        nonce: request.nonce,
        maxFeePerGas: fees.maxFeePerGas,
        maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
        value: request.value ?? 0n,
      });
    },
  };
}
