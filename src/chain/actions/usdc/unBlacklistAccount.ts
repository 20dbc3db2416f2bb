import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type UnBlacklistAccountParameters = {
  token: Address;
  account: Address;
};

/**
 * Lifts a FiatToken (USDC) blacklisting of `account`; the client must be the token's blacklister.
 * Returns the transaction hash.
 *
 * @example
 * await unBlacklistAccount(blacklisterClient, { token: usdc, account: payer });
 */
export function unBlacklistAccount(
  client: WriteClient,
  { token, account }: UnBlacklistAccountParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "unBlacklist",
    args: [account],
  });
}
