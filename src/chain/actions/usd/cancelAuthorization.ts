import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import { signatureArgs } from "./signatureArgs.ts";

export type CancelAuthorizationParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  authorizer: Address;
  nonce: Hex;
  /** The authorizer's CancelAuthorization signature (`signCancelAuthorization`). */
  signature: Hex;
  form?: "bytes" | "vrs" | undefined;
};

/** Burns an unused EIP-3009 nonce so the authorization signed with it can never settle. Returns the transaction hash. */
export function cancelAuthorization(
  client: WriteClient,
  { token, authorizer, nonce, signature, form = "bytes" }: CancelAuthorizationParameters,
): Promise<Hash> {
  if (form === "vrs") {
    const { v, r, s } = signatureArgs(signature);
    return writeContract(client, {
      address: token,
      abi: fiatTokenV2_2Abi,
      functionName: "cancelAuthorization",
      args: [authorizer, nonce, v, r, s],
    });
  }
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "cancelAuthorization",
    args: [authorizer, nonce, signature],
  });
}
