import { type Address, isAddressEqual } from "viem";
import { deployContract, waitForTransactionReceipt, writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenProxyAbi, fiatTokenProxyBytecode } from "../../contracts/circle-usdc/FiatTokenProxy.ts";
import { deployedAddress, deployFiatTokenImplementation } from "./deployFiatTokenImplementation.ts";
import { type FiatTokenSetup, initializeFiatToken } from "./initializeFiatToken.ts";

export type DeployFiatTokenParameters = FiatTokenSetup & {
  /**
   * The proxy's admin, who may upgrade the token and nothing else: a transparent proxy does not forward
   * its admin's calls, so it must be an account other than the client's (which runs the initializers).
   */
  admin: Address;
};

/**
 * Deploys Circle's USDC (FiatToken v2.2 behind a FiatTokenProxy, with its SignatureChecker library) on the
 * client's chain, initialized and with a configured minter (by default the client's account, unlimited).
 * Returns the token's (the proxy's) address.
 *
 * @example
 * const { token } = await deployFiatToken(walletClient, { admin: other.address });
 * await mintFiatToken(walletClient, { token, to: payer, amount: 10_000_000n });
 */
export async function deployFiatToken(
  client: WriteClient,
  parameters: DeployFiatTokenParameters,
): Promise<{ token: Address; implementation: Address; signatureChecker: Address }> {
  if (isAddressEqual(parameters.admin, client.account.address)) {
    throw new Error("the FiatToken proxy's admin must differ from the account that initializes the token");
  }
  const { implementation, signatureChecker } = await deployFiatTokenImplementation(client);
  const token = await deployedAddress(
    client,
    await deployContract(client, {
      abi: fiatTokenProxyAbi,
      bytecode: fiatTokenProxyBytecode,
      args: [implementation],
    }),
  );
  const receipt = await waitForTransactionReceipt(client, {
    hash: await writeContract(client, {
      address: token,
      abi: fiatTokenProxyAbi,
      functionName: "changeAdmin",
      args: [parameters.admin],
    }),
  });
  if (receipt.status !== "success") throw new Error("FiatTokenProxy.changeAdmin reverted");
  await initializeFiatToken(client, { ...parameters, token });
  return { token, implementation, signatureChecker };
}
