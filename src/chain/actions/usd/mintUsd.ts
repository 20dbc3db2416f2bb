import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";

export type MintUsdParameters = {
  /** The token (TollgateUSD or USDC). */
  token: Address;
  to: Address;
  amount: bigint;
};

/** Mints TollgateUSD (devnet only; the client must be the token owner). Returns the transaction hash. */
export function mintUsd(client: WriteClient, { token, to, amount }: MintUsdParameters): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: tollgateUsdAbi,
    functionName: "mint",
    args: [to, amount],
  });
}
