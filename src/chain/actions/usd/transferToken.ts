import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type TransferTokenParameters = {
  /** The token (USDC, or another EIP-3009 token with its ABI). */
  token: Address;
  to: Address;
  amount: bigint;
};

/** Transfers tokens from the client's account. Returns the transaction hash. */
export function transferToken(
  client: WriteClient,
  { token, to, amount }: TransferTokenParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "transfer",
    args: [to, amount],
  });
}
