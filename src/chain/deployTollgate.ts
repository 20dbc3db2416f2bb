import { type Address, getAddress, type Hash, type PublicClient } from "viem";
import { deployContract } from "viem/actions";
import { networkOf } from "../protocol/network.ts";
import type { TollgateContracts, WriteClient } from "./clientTypes.ts";
import { batchSettlerAbi, batchSettlerBytecode } from "./contracts/artifacts/BatchSettler.ts";
import {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
} from "./contracts/artifacts/SubscriptionManager.ts";
import { tollgateUsdAbi, tollgateUsdBytecode } from "./contracts/artifacts/TollgateUSD.ts";
import { getNetworkConfig } from "./networks.ts";

export type DeployTollgateOptions = {
  /** The settlement token. Default: the network's USDC, or a fresh TollgateUSD (owned by the deployer) when the network has none. */
  usd?: Address | undefined;
};

/**
 * Deploys what a network needs: SubscriptionManager and BatchSettler everywhere, TollgateUSD only where
 * no token is given or known (a devnet). Transactions are sent back to back and awaited together.
 *
 * @example
 * const contracts = await deployTollgate(walletClient, publicClient);
 */
export async function deployTollgate(
  walletClient: WriteClient,
  publicClient: Pick<PublicClient, "waitForTransactionReceipt">,
  options: DeployTollgateOptions = {},
): Promise<TollgateContracts> {
  const known = getNetworkConfig(networkOf(walletClient.chain.id))?.usdc;
  const usdAddress = options.usd ?? known;
  const hashes: Hash[] = [];
  if (usdAddress === undefined) {
    hashes.push(
      await deployContract(walletClient, {
        abi: tollgateUsdAbi,
        bytecode: tollgateUsdBytecode,
        args: [walletClient.account.address],
      }),
    );
  }
  hashes.push(
    await deployContract(walletClient, {
      abi: subscriptionManagerAbi,
      bytecode: subscriptionManagerBytecode,
    }),
  );
  hashes.push(await deployContract(walletClient, { abi: batchSettlerAbi, bytecode: batchSettlerBytecode }));
  const receipts = await Promise.all(hashes.map((hash) => publicClient.waitForTransactionReceipt({ hash })));
  const addresses = receipts.map((receipt) => {
    if (receipt.status !== "success" || receipt.contractAddress == null) {
      throw new Error(`deployment transaction ${receipt.transactionHash} failed`);
    }
    return getAddress(receipt.contractAddress);
  });
  const [subscriptionManager, batchSettler] = addresses.slice(-2) as [Address, Address];
  return { usd: usdAddress ?? addresses[0]!, subscriptionManager, batchSettler };
}
