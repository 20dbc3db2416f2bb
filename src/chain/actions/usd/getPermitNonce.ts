import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type GetPermitNonceParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  owner: Address;
};

/** Reads the EIP-2612 permit nonce of `owner` (the next permit must sign this value). */
export function getPermitNonce(client: ReadClient, { token, owner }: GetPermitNonceParameters) {
  return client.readContract({
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "nonces",
    args: [owner],
  });
}
