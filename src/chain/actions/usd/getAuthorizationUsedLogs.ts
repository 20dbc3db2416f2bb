import { type Address, getAbiItem, type Hex, type PublicClient } from "viem";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetAuthorizationUsedLogsParameters = {
  token: Address;
  authorizer: Address;
  nonce: Hex;
  fromBlock: bigint;
  toBlock: bigint;
};

/** The token's `AuthorizationUsed` logs of one (authorizer, nonce): the transaction that used it. */
export function getAuthorizationUsedLogs(
  client: Pick<PublicClient, "getLogs">,
  { token, authorizer, nonce, fromBlock, toBlock }: GetAuthorizationUsedLogsParameters,
) {
  return client.getLogs({
    address: token,
    event: getAbiItem({ abi: tollgateUsdAbi, name: "AuthorizationUsed" }),
    args: { authorizer, nonce },
    fromBlock,
    toBlock,
  });
}
