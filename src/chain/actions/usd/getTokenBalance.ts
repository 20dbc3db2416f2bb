import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenBalanceParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  owner: Address;
};

/** Reads an account's token balance (6-decimal units for USDC). */
export function getTokenBalance(client: ReadClient, { token, owner }: GetTokenBalanceParameters) {
  return client.readContract({
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "balanceOf",
    args: [owner],
  });
}
