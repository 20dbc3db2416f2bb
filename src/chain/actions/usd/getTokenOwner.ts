import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetTokenOwnerParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
};

/** Reads USDC's owner, who appoints its master minter, pauser and blacklister. */
export function getTokenOwner(client: ReadClient, { token }: GetTokenOwnerParameters) {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "owner" });
}
