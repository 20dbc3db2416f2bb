import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenTotalSupplyParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's total supply. */
export function getTokenTotalSupply(client: ReadClient, { token }: GetTokenTotalSupplyParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "totalSupply" });
}
