/**
 * The EVM networks Tollgate settles on, keyed by CAIP-2 id (docs/protocol.md), with each network's USDC and
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
  /**
   * How many blocks must hold a settlement before the payment counts as settled and its proof is
   * issued, unless the operator says otherwise (`TOLLGATE_CONFIRMATIONS`, createFacilitator's
   * `confirmations`). The reasoning is `CONFIRMATIONS` below; what a proof then promises is in
   * docs/going-live.md, "What a proof promises".
   */
  confirmations: number;
};

/**
 * Default confirmations per network, and why.
 *
 * What a reorganisation can undo on Base (an OP-stack rollup). A block passes three heads: *unsafe*
 * (the sequencer produced it and gossiped it, ~2 s after the last), *safe* (the batch holding it is
 * posted to L1 and derived from there, typically minutes later) and *finalized* (that L1 block is final,
 * two epochs, ~13 minutes, after it). A receipt is seen at the unsafe head. Only the sequencer makes
 * unsafe blocks, so they change only when it does: a restart, or a handover between sequencer replicas
 * that had not yet seen the newest block, replaces the tip — one block, rarely a few. Deeper replacement
 * happens only if what the sequencer posts to L1 fails to match what it gossiped (or is not posted within
 * the sequencing window), when derivation from L1 replaces the unsafe blocks: minutes of blocks, and not
 * something a per-request wait could cover. From safe on, only an L1 reorg undoes a block; from
 * finalized on, nothing.
 *
 * What waiting costs. Base mines every 2 s, so each confirmation adds ~2 s to the payer's wait for the
 * proof; safe is minutes away and finalized ~13 minutes (plus the posting delay): no per-request API
 * waits that long.
 *
 * So: on Base 2 — the receipt's block and one on top, ~2 s more than the receipt, which outlasts the
 * shallow tip replacement a sequencer restart or handover causes. More buys little: the cases left are
 * minutes deep, so 3 or 5 blocks would not cover them either, and they are what the reorganisation
 * watch is for (the same authorization settled again; `payment.failed` if it cannot be). On Base Sepolia
 * 1: test money, where a quick rehearsal is worth more than the tip. On a devnet 1: anvil reorganises
 * only when asked to (`anvil_reorg`, `anvil_rollback`), and automining mines a block per transaction,
 * so a second confirmation would wait for the next transaction. A network not in this table gets 1 (the
 * setting an operator should state for it).
 */
export const CONFIRMATIONS = { devnet: 1, baseSepolia: 1, base: 2, other: 1 } as const;

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
    confirmations: CONFIRMATIONS.devnet,
  },
  "eip155:84532": {
    network: "eip155:84532",
    chain: baseSepolia,
    usdc: getAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
    tokenDomain: { name: "USDC", version: "2" },
    isDevnet: false,
    confirmations: CONFIRMATIONS.baseSepolia,
  },
  "eip155:8453": {
    network: "eip155:8453",
    chain: base,
    usdc: getAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
    tokenDomain: { name: "USD Coin", version: "2" },
    isDevnet: false,
    confirmations: CONFIRMATIONS.base,
  },
};

/**
 * The confirmations a facilitator on `network` waits for when the operator states none: the network's
 * default (`CONFIRMATIONS`), 1 for a network not in the table.
 */
export function defaultConfirmations(network: string): number {
  return getNetworkConfig(network)?.confirmations ?? CONFIRMATIONS.other;
}

/** The configuration of a known network, or `undefined`. */
export function getNetworkConfig(network: string): NetworkConfig | undefined {
  return networks[network];
}
