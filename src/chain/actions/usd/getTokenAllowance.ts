import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenAllowanceParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  owner: Address;
  spender: Address;
};

/** Reads how much `spender` may pull from `owner`. */
export function getTokenAllowance(
  client: ReadClient,
  { token, owner, spender }: GetTokenAllowanceParameters,
) {
  return client.readContract({
    address: token,
    abi: tollgateUsdAbi,
    functionName: "allowance",
    args: [owner, spender],
  });
}
