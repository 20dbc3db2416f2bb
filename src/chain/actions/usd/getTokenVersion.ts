import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenVersionParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's EIP-712 domain version (`version()`, as USDC exposes it). */
export function getTokenVersion(client: ReadClient, { token }: GetTokenVersionParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "version" });
}
