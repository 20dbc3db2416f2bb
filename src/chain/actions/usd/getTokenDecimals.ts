import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenDecimalsParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's decimals (6 for USDC). */
export function getTokenDecimals(client: ReadClient, { token }: GetTokenDecimalsParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "decimals" });
}
