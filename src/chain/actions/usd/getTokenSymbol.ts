import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenSymbolParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads the token's symbol. */
export function getTokenSymbol(client: ReadClient, { token }: GetTokenSymbolParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "symbol" });
}
