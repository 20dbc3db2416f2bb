import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetIsBlacklistedParameters = {
  /** A FiatToken (USDC); a token without `isBlacklisted` reverts this read. */
  token: Address;
  account: Address;
};

/** True when a FiatToken (USDC) has blacklisted `account` (FiatToken's `isBlacklisted`). */
export function getIsBlacklisted(
  client: ReadClient,
  { token, account }: GetIsBlacklistedParameters,
): Promise<boolean> {
  return client.readContract({
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "isBlacklisted",
    args: [account],
  });
}
