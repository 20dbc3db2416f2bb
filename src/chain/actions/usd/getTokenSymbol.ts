import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenSymbolParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads the token's symbol. */
export function getTokenSymbol(client: ReadClient, { token }: GetTokenSymbolParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "symbol" });
}
