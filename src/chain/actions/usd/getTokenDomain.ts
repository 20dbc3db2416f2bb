import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenDomainParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/**
 * Reads the token's EIP-712 domain from `name()` and `version()`: USDC has no EIP-5267 `eip712Domain()`,
 * and its domain differs per deployment ("USD Coin" on Base, "USDC" on Base Sepolia).
 */
export async function getTokenDomain(
  client: ReadClient,
  { token }: GetTokenDomainParameters,
): Promise<{ name: string; version: string; verifyingContract: Address }> {
  const [name, version] = await Promise.all([
    client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "name" }),
    client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "version" }),
  ]);
  return { name, version, verifyingContract: token };
}
