import { type Address, getAddress, type Hash, type PublicClient } from "viem";
import { deployContract } from "viem/actions";
import { TollgateError } from "../protocol/errors.ts";
import { networkOf } from "../protocol/network.ts";
import { deployFiatToken } from "./actions/usdc/deployFiatToken.ts";
import type { TollgateContracts, WriteClient } from "./clientTypes.ts";
import { batchSettlerAbi, batchSettlerBytecode } from "./contracts/artifacts/BatchSettler.ts";
import {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
} from "./contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsAbi, tollgateChannelsBytecode } from "./contracts/artifacts/TollgateChannels.ts";
import { devnetChainId, getNetworkConfig } from "./networks.ts";

/**
 * The test USDC's proxy admin: an address nobody holds a key to, since a transparent proxy's admin cannot
 * use the token, and a test token never needs upgrading.
 */
const testTokenAdmin = "0x000000000000000000000000000000000000ad01" as const;

export type DeployTollgateOptions = {
  /**
   * The settlement token. Default: the network's USDC; on the devnet (chain id 31337), or with
   * `allowTestToken`, a fresh USDC (Circle's FiatToken v2.2, domain "USD Coin"/"2") whose owner, master
   * minter and minter is the deployer.
   */
  usd?: Address | undefined;
  /**
   * Deploy that test USDC on a chain other than the devnet when no token is given or known. Its deployer
   * can mint lookalike dollars at will under USDC's own name and EIP-712 domain, so on a shared chain it
   * is never deployed by default.
   */
  allowTestToken?: boolean | undefined;
};

/**
 * Deploys what a network needs: SubscriptionManager, BatchSettler and TollgateChannels everywhere, a test USDC
 * (`deployFiatToken`) only where no token is given or known and the chain is the devnet (or `allowTestToken`
 * says so). On any other
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
      `chain ${walletClient.chain.id} has no known USDC: pass the settlement token as \`usd\`, or \`allowTestToken: true\` to deploy a test USDC that the deployer can mint there`,
      { details: { chainId: walletClient.chain.id } },
    );
  }
  const usd = usdAddress ?? (await deployFiatToken(walletClient, { admin: testTokenAdmin })).token;
  const hashes: Hash[] = [];
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
  const [subscriptionManager, batchSettler, channels] = addresses as [Address, Address, Address];
  return { usd, subscriptionManager, batchSettler, channels };
}
