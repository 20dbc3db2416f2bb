import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenDomainSeparatorParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's EIP-712 domain separator. */
export function getTokenDomainSeparator(client: ReadClient, { token }: GetTokenDomainSeparatorParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "DOMAIN_SEPARATOR" });
}
