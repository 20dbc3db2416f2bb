import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenBalanceParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  owner: Address;
};

/** Reads an account's token balance (6-decimal units for USDC). */
export function getTokenBalance(client: ReadClient, { token, owner }: GetTokenBalanceParameters) {
  return client.readContract({
    address: token,
    abi: tollgateUsdAbi,
    functionName: "balanceOf",
    args: [owner],
  });
}
