import { type Address, getAbiItem, type Hex, type PublicClient } from "viem";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import { getLogsPaged } from "../getLogsPaged.ts";

export type GetAuthorizationUsedLogsParameters = {
  token: Address;
  authorizer: Address;
  nonce: Hex;
  fromBlock: bigint;
  toBlock: bigint;
  /** Most blocks one `eth_getLogs` call spans (default 2 000): providers refuse wider ranges. */
  maxRange?: bigint | number | undefined;
};

/**
 * The token's `AuthorizationUsed` logs of one (authorizer, nonce): the transaction that used it. A nonce
 * is used once, so the range is read newest page first and the search stops at the page that has it.
 */
export function getAuthorizationUsedLogs(
  client: Pick<PublicClient, "getLogs" | "getBlockNumber">,
  { token, authorizer, nonce, fromBlock, toBlock, maxRange }: GetAuthorizationUsedLogsParameters,
) {
  return getLogsPaged(client, {
    address: token,
    event: getAbiItem({ abi: fiatTokenV2_2Abi, name: "AuthorizationUsed" }),
    args: { authorizer, nonce },
    fromBlock,
    toBlock,
    maxRange,
    order: "newest-first",
  });
}
