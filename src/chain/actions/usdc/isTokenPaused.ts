import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type IsTokenPausedParameters = {
  /** A FiatToken (USDC): its pauser can stop every transfer, mint and burn until it unpauses. */
  token: Address;
};

/**
 * Reads FiatToken's `paused()`. A token without the function (one that cannot pause) makes the call
 * revert with no data.
 *
 * @example
 * if (await isTokenPaused(publicClient, { token: usdc })) return "held";
 */
export function isTokenPaused(client: ReadClient, { token }: IsTokenPausedParameters): Promise<boolean> {
  return client.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName: "paused" });
}
