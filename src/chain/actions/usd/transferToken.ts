import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type TransferTokenParameters = {
  /** The token (TollgateUSD or USDC). */
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
    abi: tollgateUsdAbi,
    functionName: "transfer",
    args: [to, amount],
  });
}
