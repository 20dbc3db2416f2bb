import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenDecimalsParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's decimals (6 for USDC and TollgateUSD). */
export function getTokenDecimals(client: ReadClient, { token }: GetTokenDecimalsParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "decimals" });
}
