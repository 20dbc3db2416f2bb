import type { Address, Hex } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetAuthorizationStateParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  authorizer: Address;
  nonce: Hex;
  /** The block to read at (default the latest). */
  blockNumber?: bigint | undefined;
};

/** Reads whether an EIP-3009 authorization nonce was used or cancelled. */
export function getAuthorizationState(
  client: ReadClient,
  { token, authorizer, nonce, blockNumber }: GetAuthorizationStateParameters,
) {
  return client.readContract({
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "authorizationState",
    args: [authorizer, nonce],
    ...(blockNumber === undefined ? {} : { blockNumber }),
  });
}
