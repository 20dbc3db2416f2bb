import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenNameParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's name (also its EIP-712 domain name on USDC). */
export function getTokenName(client: ReadClient, { token }: GetTokenNameParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "name" });
}
