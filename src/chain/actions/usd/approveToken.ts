import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type ApproveTokenParameters = {
  /** The token (TollgateUSD or USDC). */
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
    abi: tollgateUsdAbi,
    functionName: "approve",
    args: [spender, amount],
  });
}
