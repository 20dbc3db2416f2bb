import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { batchSettlerAbi } from "../../contracts/artifacts/BatchSettler.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";

export type SettlementItem = { authorization: TransferAuthorization; signature: Hex };

export type SettleParameters = {
  /** The BatchSettler. */
  settler: Address;
  /** The token every item transfers (TollgateUSD or USDC with the `bytes signature` EIP-3009 form). */
  token: Address;
  items: readonly SettlementItem[];
  /** Gas limit; by default estimated (the estimate covers every item, failing ones included). */
  gas?: bigint | undefined;
};

/**
 * Settles many EIP-3009 authorizations in one transaction; each item succeeds or fails alone. Per-item
 * outcomes are the receipt's Settled / SettleFailed events (`decodeSettlerEvents`). Returns the hash.
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
    ...(gas === undefined ? {} : { gas }),
  });
}
