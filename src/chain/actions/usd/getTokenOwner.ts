import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetTokenOwnerParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Reads TollgateUSD's owner, the only account that may mint. */
export function getTokenOwner(client: ReadClient, { token }: GetTokenOwnerParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "owner" });
}
