import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type BlacklistAccountParameters = {
  token: Address;
  account: Address;
};

/**
 * Blacklists `account` on a FiatToken (USDC): from then on the token refuses every transfer, approval
 * and EIP-3009 authorization from or to it. The client must be the token's blacklister. Returns the
 * transaction hash.
 *
 * @example
 * await blacklistAccount(blacklisterClient, { token: usdc, account: payer });
 */
export function blacklistAccount(
  client: WriteClient,
  { token, account }: BlacklistAccountParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "blacklist",
    args: [account],
  });
}
