import { type Address, getAddress, type Hash, type PublicClient } from "viem";
import { deployContract } from "viem/actions";
import { TollgateError } from "../protocol/errors.ts";
import { networkOf } from "../protocol/network.ts";
import type { TollgateContracts, WriteClient } from "./clientTypes.ts";
import { batchSettlerAbi, batchSettlerBytecode } from "./contracts/artifacts/BatchSettler.ts";
import {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
} from "./contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsAbi, tollgateChannelsBytecode } from "./contracts/artifacts/TollgateChannels.ts";
import { tollgateUsdAbi, tollgateUsdBytecode } from "./contracts/artifacts/TollgateUSD.ts";
import { devnetChainId, getNetworkConfig } from "./networks.ts";

export type DeployTollgateOptions = {
  /**
   * The settlement token. Default: the network's USDC; on the devnet (chain id 31337), or with
   * `allowTestToken`, a fresh TollgateUSD owned by the deployer.
   */
  usd?: Address | undefined;
  /**
   * Deploy TollgateUSD on a chain other than the devnet when no token is given or known. TollgateUSD is
   * an owner-mintable "USD Coin" with USDC's EIP-712 domain: on a shared chain its owner can mint
   * lookalike dollars at will, so it is never deployed there by default.
   */
  allowTestToken?: boolean | undefined;
};

/**
 * Deploys what a network needs: SubscriptionManager, BatchSettler and TollgateChannels everywhere, TollgateUSD only where
 * no token is given or known and the chain is the devnet (or `allowTestToken` says so). On any other
 * chain without a known USDC, `usd` is required: the call throws `InvalidRequest` before sending
 * anything. Transactions are sent back to back and awaited together.
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
  if (
    usdAddress === undefined &&
    walletClient.chain.id !== devnetChainId &&
    options.allowTestToken !== true
  ) {
    throw new TollgateError(
      "InvalidRequest",
      `chain ${walletClient.chain.id} has no known USDC: pass the settlement token as \`usd\`, or \`allowTestToken: true\` to deploy an owner-mintable test token there`,
      { details: { chainId: walletClient.chain.id } },
    );
  }
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
  hashes.push(
    await deployContract(walletClient, { abi: tollgateChannelsAbi, bytecode: tollgateChannelsBytecode }),
  );
  const receipts = await Promise.all(hashes.map((hash) => publicClient.waitForTransactionReceipt({ hash })));
  const addresses = receipts.map((receipt) => {
    if (receipt.status !== "success" || receipt.contractAddress == null) {
      throw new Error(`deployment transaction ${receipt.transactionHash} failed`);
    }
    return getAddress(receipt.contractAddress);
  });
  const [subscriptionManager, batchSettler, channels] = addresses.slice(-3) as [Address, Address, Address];
  return { usd: usdAddress ?? addresses[0]!, subscriptionManager, batchSettler, channels };
}
