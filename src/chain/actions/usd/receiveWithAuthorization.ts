import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";
import { signatureArgs } from "./signatureArgs.ts";

export type ReceiveWithAuthorizationParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  authorization: TransferAuthorization;
  /** The payer's signature (`signReceiveAuthorization`). */
  signature: Hex;
  /**
   * `"bytes"` (default) calls the USDC v2.2 form that also takes ERC-1271 signatures; `"vrs"` the
   * original EIP-3009 form, for tokens without the bytes overload.
   */
  form?: "bytes" | "vrs" | undefined;
};

/** Submits an EIP-3009 receive authorization; the client must be the payee (`to`). Returns the transaction hash. */
export function receiveWithAuthorization(
  client: WriteClient,
  { token, authorization: a, signature, form = "bytes" }: ReceiveWithAuthorizationParameters,
): Promise<Hash> {
  if (form === "vrs") {
    const { v, r, s } = signatureArgs(signature);
    return writeContract(client, {
      address: token,
      abi: fiatTokenV2_2Abi,
      functionName: "receiveWithAuthorization",
      args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, v, r, s],
    });
  }
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "receiveWithAuthorization",
    args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
  });
}
