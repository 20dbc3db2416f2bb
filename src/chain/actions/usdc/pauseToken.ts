import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type PauseTokenParameters = { token: Address };

/**
 * Pauses a FiatToken (USDC): until `unpauseToken`, every transfer, `transferWithAuthorization`, mint
 * and burn reverts "Pausable: paused". The client must be the token's pauser. Returns the transaction hash.
 *
 * @example
 * await publicClient.waitForTransactionReceipt({ hash: await pauseToken(pauserClient, { token: usdc }) });
 */
export function pauseToken(client: WriteClient, { token }: PauseTokenParameters): Promise<Hash> {
  return writeContract(client, { address: token, abi: fiatTokenV2_2Abi, functionName: "pause" });
}
