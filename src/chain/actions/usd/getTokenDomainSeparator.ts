import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenDomainSeparatorParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's EIP-712 domain separator. */
export function getTokenDomainSeparator(client: ReadClient, { token }: GetTokenDomainSeparatorParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "DOMAIN_SEPARATOR" });
}
