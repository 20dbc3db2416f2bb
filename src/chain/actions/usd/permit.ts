import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import { signatureArgs } from "./signatureArgs.ts";

export type PermitParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  owner: Address;
  spender: Address;
  value: bigint;
  deadline: bigint;
  /** The owner's EIP-2612 signature (`signPermit`). */
  signature: Hex;
};

/** Submits an EIP-2612 permit, so the owner approves without paying gas. Returns the transaction hash. */
export function permit(
  client: WriteClient,
  { token, owner, spender, value, deadline, signature }: PermitParameters,
): Promise<Hash> {
  const { v, r, s } = signatureArgs(signature);
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "permit",
    args: [owner, spender, value, deadline, v, r, s],
  });
}
