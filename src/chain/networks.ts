/**
 * The EVM networks Tollgate settles on, keyed by CAIP-2 id (DESIGN.md §2), with each network's USDC and
 * the EIP-712 domain name/version that USDC contract signs under.
 *
 * USDC's domain differs per deployment (its `name()`/`version()`, which EIP-3009 signatures commit to):
 * on Base it is {name: "USD Coin", version: "2"}, on Base Sepolia {name: "USDC", version: "2"} — the
 * values Circle's FiatTokenV2_2 proxies return there and that x402's network table uses. A devnet deploys
 * its own USDC, so its address and domain are the chain's to say (`startDevnet` reads them back and
 * `.tollgate/devnet.json` records them), not this table's. CAIP-2 parsing is `chainIdOf`/`networkOf` in src/protocol/network.ts.
 */
import { type Address, type Chain, defineChain, getAddress } from "viem";
import { base, baseSepolia } from "viem/chains";
import type { Network } from "../protocol/network.ts";

export type NetworkConfig = {
  network: Network;
  chain: Chain;
  /** USDC on this network; `undefined` on a devnet, which deploys its own (Circle's FiatToken v2.2). */
  usdc: Address | undefined;
  /** EIP-712 domain name and version of the network's USDC; `undefined` where `usdc` is. */
  tokenDomain: { name: string; version: string } | undefined;
  isDevnet: boolean;
};

export const devnetChainId = 31337;

/** Anvil's default chain: one-second blocks are not assumed, so viem polls quickly. */
export const devnetChain = defineChain({
  id: devnetChainId,
  name: "Tollgate devnet",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: ["http://127.0.0.1:8545"] } },
  testnet: true,
});

export const networks: Record<string, NetworkConfig> = {
  "eip155:31337": {
    network: "eip155:31337",
    chain: devnetChain,
    usdc: undefined,
    tokenDomain: undefined,
    isDevnet: true,
  },
  "eip155:84532": {
    network: "eip155:84532",
    chain: baseSepolia,
    usdc: getAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
    tokenDomain: { name: "USDC", version: "2" },
    isDevnet: false,
  },
  "eip155:8453": {
    network: "eip155:8453",
    chain: base,
    usdc: getAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
    tokenDomain: { name: "USD Coin", version: "2" },
    isDevnet: false,
  },
};

/** The configuration of a known network, or `undefined`. */
export function getNetworkConfig(network: string): NetworkConfig | undefined {
  return networks[network];
}
