/**
 * The gas account's signing half: the key, its in-process nonce manager (nonceManager.ts) and a short
 * fee cache. Only the transaction outbox signs with it, so every transaction of the key is recorded
 * before it is broadcast and no two share a nonce.
 */
import type { Address, Hex, LocalAccount, PublicClient } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import { createNonceManager, type NonceManager } from "./nonceManager.ts";

export type GasKeyClient = Pick<PublicClient, "getTransactionCount" | "estimateFeesPerGas" | "getBlock">;

export type GasFees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };

export type GasKey = {
  readonly address: Address;
  readonly account: LocalAccount;
  readonly chainId: number;
  /** The in-process nonce manager of this key; the outbox takes nonces through it. */
  readonly nonces: NonceManager;
  /**
   * Fees for a new transaction (cached for a few seconds, with headroom for a rising base fee), never
   * above `maxFeePerGas`; `fresh` reads the chain now (a fee bump).
   */
  fees(options?: { fresh?: boolean }): Promise<GasFees>;
  /**
   * The `maxFeePerGas` the chain asks for a transaction now, before the ceiling (the last `fees` read);
   * `undefined` before the first read.
   */
  wantedFee(): bigint | undefined;
  /** The latest block's base fee (cached for a few seconds like the fees); `undefined` before London. */
  baseFee(): Promise<bigint | undefined>;
  /** The operator's maximum `maxFeePerGas` (smallest unit per gas); `undefined`: none. */
  readonly maxFeePerGas: bigint | undefined;
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
  /**
   * The most a transaction of this key offers per gas (`maxFeePerGas`, smallest unit): new transactions
   * and fee bumps stay at or under it, and wait while the chain asks more (rowDriver.ts). Default: none.
   */
  maxFeePerGas?: bigint | undefined;
}): GasKey {
  const { account, client, clock, chainId } = options;
  const ceiling = options.maxFeePerGas;
  let cachedFees: (GasFees & { at: number }) | undefined;
  let wanted: bigint | undefined;
  let cachedBase: { at: number; fee: bigint | undefined } | undefined;
  return {
    address: account.address,
    account,
    chainId,
    maxFeePerGas: ceiling,
    nonces: createNonceManager({ address: account.address, client }),
    async fees(options) {
      if (options?.fresh !== true && cachedFees !== undefined && clock.now() - cachedFees.at < FEE_CACHE_MS) {
        return cachedFees;
      }
      const estimate = await client.estimateFeesPerGas();
      wanted = estimate.maxFeePerGas ?? 0n;
      // Headroom so a transaction survives a few blocks of base-fee rise; never above the ceiling.
      let maxFeePerGas = wanted * 2n;
      if (ceiling !== undefined && maxFeePerGas > ceiling) maxFeePerGas = ceiling;
      const tip = estimate.maxPriorityFeePerGas ?? 0n;
      cachedFees = {
        at: clock.now(),
        maxFeePerGas,
        maxPriorityFeePerGas: tip > maxFeePerGas ? maxFeePerGas : tip,
      };
      return cachedFees;
    },
    wantedFee: () => wanted,
    async baseFee() {
      if (cachedBase !== undefined && clock.now() - cachedBase.at < FEE_CACHE_MS) return cachedBase.fee;
      const block = await client.getBlock({ blockTag: "latest" });
      cachedBase = { at: clock.now(), fee: block.baseFeePerGas ?? undefined };
      return cachedBase.fee;
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
