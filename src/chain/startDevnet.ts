import { pbkdf2Sync } from "node:crypto";
import {
  type Account,
  type Address,
  type Chain,
  createPublicClient,
  createTestClient,
  createWalletClient,
  defineChain,
  type Hex,
  http,
  type PrivateKeyAccount,
  type PublicClient,
  type TestClient,
  type Transport,
  toHex,
  type WalletClient,
} from "viem";
import { HDKey, privateKeyToAccount } from "viem/accounts";
import { getTokenDomain } from "./actions/usd/getTokenDomain.ts";
import { mintFiatToken } from "./actions/usdc/mintFiatToken.ts";
import type { TollgateContracts } from "./clientTypes.ts";
import { deployTollgate } from "./deployTollgate.ts";
import { devnetChain } from "./networks.ts";
import { type AnvilLogger, startAnvil } from "./startAnvil.ts";

/** The mnemonic anvil derives its dev accounts from (public; never use it for real funds). */
export const anvilMnemonic = "test test test test test test test test test test test junk";

export type DevnetAccount = { address: Address; privateKey: Hex; account: PrivateKeyAccount };

export type StartDevnetOptions = {
  /** Seconds per block; default automine (each transaction mined at once). */
  blockTime?: number | undefined;
  /** Dev accounts to fund (default 10); the first is the deployer. */
  accounts?: number | undefined;
  /** USDC minted to every account, in 6-decimal units (default 10 000 USDC). */
  balance?: bigint | undefined;
  /** Loopback port (default: a free one). */
  port?: number | undefined;
  logger?: AnvilLogger | undefined;
  /** The network family anvil imitates (startAnvil.ts): `optimism` for an OP-stack chain such as Base. */
  network?: "ethereum" | "optimism" | undefined;
  /**
   * The settlement token: Circle's USDC (FiatToken v2.2, domain "USD Coin"/"2" as on Base,
   * src/chain/contracts/circle-usdc) with the deployer as owner, master minter and minter. The only one
   * there is; the option names it for callers that want to say so.
   */
  token?: DevnetToken | undefined;
};

/** Which token a devnet settles in. */
export type DevnetToken = "usdc";

/** The token a devnet settles in, with its EIP-712 domain's name and version as read from the chain. */
export type DevnetTokenInfo = { kind: DevnetToken; name: string; version: string };

export type Devnet = {
  rpcUrl: string;
  chain: Chain;
  network: "eip155:31337";
  accounts: DevnetAccount[];
  deployer: DevnetAccount;
  contracts: TollgateContracts;
  /** The settlement token at `contracts.usd`. */
  token: DevnetTokenInfo;
  publicClient: PublicClient<Transport, Chain>;
  testClient: TestClient<"anvil", Transport, Chain>;
  /** A wallet client for a dev account (or any local account) on this devnet. */
  walletClient(account: DevnetAccount | Account): WalletClient<Transport, Chain, Account>;
  /** Gives an address USDC (minted by the deployer, the token's minter) and, optionally, ETH. */
  fund(address: Address, amounts: { usd?: bigint; eth?: bigint }): Promise<void>;
  /** Moves chain time forward and mines a block; returns the new block timestamp. */
  advanceTime(seconds: number | bigint): Promise<bigint>;
  mine(blocks?: number): Promise<void>;
  snapshot(): Promise<Hex>;
  revert(id: Hex): Promise<void>;
  /** Stops anvil; idempotent. */
  stop(): Promise<void>;
};

/** viem polls receipts every 4 s by default, which on an automining chain is pure waiting. */
const pollingInterval = 50;

/** The dev mnemonic's BIP-32 node m/44'/60'/0'/0, derived once per process. */
let devnetAccounts: HDKey | undefined;

/** The private key of anvil's dev account `index` (BIP-44 path m/44'/60'/0'/0/index). */
export function devnetPrivateKey(index: number): Hex {
  // BIP-39's seed is PBKDF2-HMAC-SHA512 of the mnemonic (NFKD) with the salt "mnemonic", 2 048 rounds:
  // ~20 ms each time in JavaScript, which deriving every key from the mnemonic paid again.
  devnetAccounts ??= HDKey.fromMasterSeed(
    pbkdf2Sync(anvilMnemonic.normalize("NFKD"), "mnemonic", 2048, 64, "sha512"),
  ).derive("m/44'/60'/0'/0");
  const key = devnetAccounts.deriveChild(index).privateKey;
  if (key === null) throw new Error("cannot derive a dev key");
  return toHex(key);
}

/**
 * Starts a local anvil chain with Tollgate deployed (USDC — Circle's FiatToken v2.2 —, SubscriptionManager,
 * BatchSettler, TollgateChannels) and every dev account holding USDC.
 *
 * @example
 * const devnet = await startDevnet();
 * try { … } finally { await devnet.stop(); }
 */
export async function startDevnet(options: StartDevnetOptions = {}): Promise<Devnet> {
  const count = options.accounts ?? 10;
  if (count < 1) throw new Error("a devnet needs at least one account");
  const anvil = await startAnvil({
    port: options.port,
    blockTime: options.blockTime,
    accounts: count,
    logger: options.logger,
    network: options.network,
  });
  try {
    return await setUpDevnet(anvil.rpcUrl, count, options.balance ?? 10_000_000_000n, () => anvil.stop(), {
      token: options.token,
    });
  } catch (error) {
    await anvil.stop();
    throw error;
  }
}

/** Connects to a running anvil at `rpcUrl`, deploys Tollgate and funds `count` dev accounts. */
export async function setUpDevnet(
  rpcUrl: string,
  count: number,
  balance: bigint,
  stop: () => Promise<void>,
  options: { token?: DevnetToken | undefined } = {},
): Promise<Devnet> {
  const connected = connectDevnet(rpcUrl, count, stop);
  const { deployer, publicClient } = connected;
  const deployerClient = connected.walletClient(deployer);
  if (options.token !== undefined && options.token !== "usdc") {
    throw new Error(`a devnet settles in USDC, not ${String(options.token)}`);
  }
  // With no token given, deployTollgate deploys FiatToken on the devnet, the deployer its minter.
  const contracts = await deployTollgate(deployerClient, publicClient);
  const mint = (to: Address, amount: bigint) =>
    mintFiatToken(deployerClient, { token: contracts.usd, to, amount });
  const { name, version } = await getTokenDomain(publicClient, { token: contracts.usd });
  const devnet: Devnet = {
    ...connected,
    contracts,
    token: { kind: "usdc", name, version },
    async fund(address, amounts) {
      if (amounts.eth !== undefined) {
        const current = await publicClient.getBalance({ address });
        await connected.testClient.setBalance({ address, value: current + amounts.eth });
      }
      if (amounts.usd !== undefined && amounts.usd > 0n) {
        const hash = await mint(address, amounts.usd);
        await publicClient.waitForTransactionReceipt({ hash });
      }
    },
  };
  if (balance > 0n) {
    const hashes: Hex[] = [];
    for (const { address } of connected.accounts) {
      hashes.push(await mint(address, balance));
    }
    await Promise.all(hashes.map((hash) => publicClient.waitForTransactionReceipt({ hash })));
  }
  return devnet;
}

/** Clients and helpers for a running devnet, without deploying anything. */
export function connectDevnet(
  rpcUrl: string,
  count: number,
  stop: () => Promise<void>,
): Omit<Devnet, "contracts" | "token" | "fund"> {
  const chain = defineChain({ ...devnetChain, rpcUrls: { default: { http: [rpcUrl] } } });
  const transport = http(rpcUrl);
  const accounts: DevnetAccount[] = Array.from({ length: count }, (_, i) => {
    const privateKey = devnetPrivateKey(i);
    const account = privateKeyToAccount(privateKey);
    return { address: account.address, privateKey, account };
  });
  const publicClient = createPublicClient({ chain, transport, pollingInterval, cacheTime: 0 });
  const testClient = createTestClient({ chain, transport, mode: "anvil", pollingInterval });
  return {
    rpcUrl,
    chain,
    network: "eip155:31337",
    accounts,
    deployer: accounts[0]!,
    publicClient,
    testClient,
    walletClient(account) {
      const local = "account" in account && "privateKey" in account ? account.account : (account as Account);
      return createWalletClient({ chain, transport, account: local, pollingInterval });
    },
    async advanceTime(seconds) {
      await testClient.increaseTime({ seconds: Number(seconds) });
      await testClient.mine({ blocks: 1 });
      const block = await publicClient.getBlock({ blockTag: "latest" });
      return block.timestamp;
    },
    async mine(blocks = 1) {
      await testClient.mine({ blocks });
    },
    snapshot: () => testClient.snapshot(),
    async revert(id) {
      await testClient.revert({ id });
    },
    stop,
  };
}
