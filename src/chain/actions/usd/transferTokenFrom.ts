import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type TransferTokenFromParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  from: Address;
  to: Address;
  amount: bigint;
};

/** Pulls tokens under an allowance. Returns the transaction hash. */
export function transferTokenFrom(
  client: WriteClient,
  { token, from, to, amount }: TransferTokenFromParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: tollgateUsdAbi,
    functionName: "transferFrom",
    args: [from, to, amount],
  });
}
