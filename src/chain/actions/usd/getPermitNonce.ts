import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type GetPermitNonceParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  owner: Address;
};

/** Reads the EIP-2612 permit nonce of `owner` (the next permit must sign this value). */
export function getPermitNonce(client: ReadClient, { token, owner }: GetPermitNonceParameters) {
  return client.readContract({ address: token, abi: tollgateUsdAbi, functionName: "nonces", args: [owner] });
}
