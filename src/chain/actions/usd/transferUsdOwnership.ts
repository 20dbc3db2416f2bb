import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type TransferUsdOwnershipParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  newOwner: Address;
};

/** Hands TollgateUSD's minting right to another account. Returns the transaction hash. */
export function transferUsdOwnership(
  client: WriteClient,
  { token, newOwner }: TransferUsdOwnershipParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: tollgateUsdAbi,
    functionName: "transferOwnership",
    args: [newOwner],
  });
}
