import type { Address, Hex, PublicClient } from "viem";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import type { TransferAuthorization } from "../../signers/signTransferAuthorization.ts";

export type SimulateTransferWithAuthorizationParameters = {
  token: Address;
  authorization: TransferAuthorization;
  signature: Hex;
  /** Who submits it (the BatchSettler, for a facilitator's settlement). */
  account: Address;
  /** The most gas the call may use. */
  gas?: bigint | undefined;
  /** The block simulated on (default `pending`, see below). */
  blockTag?: "latest" | "pending" | undefined;
};

/**
 * Simulates `transferWithAuthorization`, by default in the pending block (where a settlement lands: an
 * idle devnet's latest block can be older than the authorization's validAfter, EIP-3009: valid strictly
 * after it). Throws viem's error for a revert.
 */
export async function simulateTransferWithAuthorization(
  client: Pick<PublicClient, "simulateContract">,
  { token, authorization: a, signature, account, gas, blockTag }: SimulateTransferWithAuthorizationParameters,
): Promise<void> {
  await client.simulateContract({
    address: token,
    abi: fiatTokenV2_2Abi,
    functionName: "transferWithAuthorization",
    args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
    account,
    blockTag: blockTag ?? "pending",
    ...(gas === undefined ? {} : { gas }),
  });
}
