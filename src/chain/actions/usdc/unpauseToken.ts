import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type UnpauseTokenParameters = { token: Address };

/**
 * Unpauses a FiatToken (USDC) paused by `pauseToken`; the client must be the token's pauser. Returns the
 * transaction hash.
 *
 * @example
 * await publicClient.waitForTransactionReceipt({ hash: await unpauseToken(pauserClient, { token: usdc }) });
 */
export function unpauseToken(client: WriteClient, { token }: UnpauseTokenParameters): Promise<Hash> {
  return writeContract(client, { address: token, abi: fiatTokenV2_2Abi, functionName: "unpause" });
}
