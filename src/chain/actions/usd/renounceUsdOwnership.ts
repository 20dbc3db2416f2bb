import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type RenounceUsdOwnershipParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
};

/** Gives up TollgateUSD's minting right for good. Returns the transaction hash. */
export function renounceUsdOwnership(
  client: WriteClient,
  { token }: RenounceUsdOwnershipParameters,
): Promise<Hash> {
  return writeContract(client, { address: token, abi: tollgateUsdAbi, functionName: "renounceOwnership" });
}
