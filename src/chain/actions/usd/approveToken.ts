import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type ApproveTokenParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  spender: Address;
  amount: bigint;
};

/** Approves `spender` (e.g. the SubscriptionManager) to pull tokens. Returns the transaction hash. */
export function approveToken(
  client: WriteClient,
  { token, spender, amount }: ApproveTokenParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "approve",
    args: [spender, amount],
  });
}
