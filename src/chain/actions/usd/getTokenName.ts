import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenNameParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's name (also its EIP-712 domain name on TollgateUSD and USDC). */
export function getTokenName(client: ReadClient, { token }: GetTokenNameParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "name" });
}
