import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenVersionParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's EIP-712 domain version (`version()`, as USDC exposes it). */
export function getTokenVersion(client: ReadClient, { token }: GetTokenVersionParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "version" });
}
