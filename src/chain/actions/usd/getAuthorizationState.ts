import type { Address, Hex } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetAuthorizationStateParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  authorizer: Address;
  nonce: Hex;
};

/** Reads whether an EIP-3009 authorization nonce was used or cancelled. */
export function getAuthorizationState(
  client: ReadClient,
  { token, authorizer, nonce }: GetAuthorizationStateParameters,
) {
  return client.readContract({
    address: token,
    abi: tollgateUsdAbi,
    functionName: "authorizationState",
    args: [authorizer, nonce],
  });
}
