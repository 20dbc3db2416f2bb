import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenAllowanceParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
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
    abi: fiatTokenV2_2Abi,
    functionName: "allowance",
    args: [owner, spender],
  });
}
