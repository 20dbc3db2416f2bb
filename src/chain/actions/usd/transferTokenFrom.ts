import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type TransferTokenFromParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  from: Address;
  to: Address;
  amount: bigint;
};

/** Pulls tokens under an allowance. Returns the transaction hash. */
export function transferTokenFrom(
  client: WriteClient,
  { token, from, to, amount }: TransferTokenFromParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "transferFrom",
    args: [from, to, amount],
  });
}
