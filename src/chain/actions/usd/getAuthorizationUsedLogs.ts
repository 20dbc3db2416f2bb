import { type Address, getAbiItem, type Hex, type PublicClient } from "viem";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

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
    event: getAbiItem({ abi: fiatTokenV2_2Abi, name: "AuthorizationUsed" }),
    args: { authorizer, nonce },
    fromBlock,
    toBlock,
  });
}
