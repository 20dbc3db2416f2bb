import type { Address } from "viem";
import { batchSettlerAbi } from "../../contracts/artifacts/BatchSettler.ts";
import { contractCall, type TxCall } from "../txCall.ts";
import { type SettlementItem, settleGasLimit } from "./settle.ts";

export type SettleCallParameters = {
  /** The BatchSettler. */
  settler: Address;
  /** The token every item transfers. */
  token: Address;
  items: readonly SettlementItem[];
};

/**
 * The `settle` call as a `TxCall` for a key that signs outside viem (the facilitator's outbox), with the
 * gas limit of `settleGasLimit` (never estimated: see `settle`).
 */
export function settleCall({ settler, token, items }: SettleCallParameters): TxCall {
  return contractCall({
    address: settler,
    abi: batchSettlerAbi,
    functionName: "settle",
    args: [
      token,
      items.map(({ authorization: a, signature }) => ({
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
        signature,
      })),
    ],
    gas: settleGasLimit(items.length),
  });
}
