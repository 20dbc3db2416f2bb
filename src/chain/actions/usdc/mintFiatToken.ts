import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type MintFiatTokenParameters = {
  token: Address;
  to: Address;
  amount: bigint;
};

/** Mints FiatToken (USDC); the client must be a minter with enough allowance left. Returns the transaction hash. */
export function mintFiatToken(
  client: WriteClient,
  { token, to, amount }: MintFiatTokenParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "mint",
    args: [to, amount],
  });
}
