import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenTotalSupplyParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's total supply. */
export function getTokenTotalSupply(client: ReadClient, { token }: GetTokenTotalSupplyParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "totalSupply" });
}
