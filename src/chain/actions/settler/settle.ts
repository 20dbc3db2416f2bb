import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { batchSettlerAbi } from "../../contracts/artifacts/BatchSettler.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";

export type SettlementItem = { authorization: TransferAuthorization; signature: Hex };

export type SettleParameters = {
  /** The BatchSettler. */
  settler: Address;
  /** The token every item transfers (USDC, or a token with its `bytes signature` EIP-3009 form). */
  token: Address;
  items: readonly SettlementItem[];
  /**
   * Gas limit; by default `settleGasLimit(items.length)`. Not estimated: the settler defers the items it
   * cannot give their full per-item gas, so the lowest gas at which the call succeeds settles almost none.
   */
  gas?: bigint | undefined;
};

/** BatchSettler's `ITEM_GAS`: the gas one item's `transferWithAuthorization` may use. */
export const SETTLER_ITEM_GAS = 150_000n;
/** BatchSettler's `ITEM_GAS_REQUIRED`: the gas left that an item needs before it is attempted. */
export const SETTLER_ITEM_GAS_REQUIRED = (SETTLER_ITEM_GAS * 64n) / 63n + 30_000n;

/**
 * A gas limit under which every honest item of a batch is attempted: a fixed part, a generous 110 000 per
 * item (an EOA payer uses about 47 000, see bench/gas.ts) and the room the last item needs to be offered its
 * full ITEM_GAS. A payer whose wallet burns gas costs at most ITEM_GAS; items it leaves without enough gas
 * are reported `Deferred`, never failed.
 */
export function settleGasLimit(items: number): bigint {
  return 80_000n + 110_000n * BigInt(items) + SETTLER_ITEM_GAS_REQUIRED;
}

/**
 * Settles many EIP-3009 authorizations in one transaction; each item succeeds or fails alone. Per-item
 * outcomes are the receipt's Settled / SettleFailed / Deferred events (`decodeSettlerEvents`). Returns the
 * hash.
 */
export function settle(client: WriteClient, { settler, token, items, gas }: SettleParameters): Promise<Hash> {
  const args = items.map(({ authorization: a, signature }) => ({
    from: a.from,
    to: a.to,
    value: a.value,
    validAfter: a.validAfter,
    validBefore: a.validBefore,
    nonce: a.nonce,
    signature,
  }));
  return writeContract(client, {
    address: settler,
    abi: batchSettlerAbi,
    functionName: "settle",
    args: [token, args],
    gas: gas ?? settleGasLimit(items.length),
  });
}
