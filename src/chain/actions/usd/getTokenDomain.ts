import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenDomainParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/**
 * Reads the token's EIP-712 domain from `name()` and `version()` — the two calls USDC and TollgateUSD
 * both answer (USDC has no EIP-5267 `eip712Domain()`).
 */
export async function getTokenDomain(
  client: ReadClient,
  { token }: GetTokenDomainParameters,
): Promise<{ name: string; version: string; verifyingContract: Address }> {
  const [name, version] = await Promise.all([
    client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "name" }),
    client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "version" }),
  ]);
  return { name, version, verifyingContract: token };
}
