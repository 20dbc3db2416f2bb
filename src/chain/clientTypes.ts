/**
 * The narrow client shapes Tollgate's chain actions take, viem style: reads need only `readContract`,
 * writes a client that carries its account and chain (a viem `WalletClient` created with both).
 */
import type { Account, Chain, Client, PublicClient, Transport } from "viem";

/** Anything that can read a contract: a viem `PublicClient`, or a `Pick` of one. */
export type ReadClient = Pick<PublicClient, "readContract">;

/** A client with a fixed account and chain, as `createWalletClient({ account, chain, transport })` makes. */
export type WriteClient = Client<Transport, Chain, Account>;

/** Addresses of a Tollgate deployment on one network. */
export type TollgateContracts = {
  /** The settlement token: USDC (on a devnet, the FiatToken v2.2 it deployed). */
  usd: `0x${string}`;
  subscriptionManager: `0x${string}`;
  batchSettler: `0x${string}`;
  /** TollgateChannels: prepaid channels paid by P-256 session-key vouchers (docs/channels.md). */
  channels: `0x${string}`;
};
