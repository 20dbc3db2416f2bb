/**
 * Networks as CAIP-2 chain ids (docs/protocol.md): `eip155:<decimal chain id>`. Tollgate settles on EVM
 * chains only, so the namespace is always `eip155`.
 */
import { z } from "zod";
import { TollgateError } from "./errors.ts";

export type Network = `eip155:${number}`;

/** Local anvil devnet. */
export const DEVNET = "eip155:31337" satisfies Network;
/** Base Sepolia testnet. */
export const BASE_SEPOLIA = "eip155:84532" satisfies Network;
/** Base mainnet. */
export const BASE = "eip155:8453" satisfies Network;

// CAIP-2 reference for eip155 is the decimal chain id; canonical (no leading zeros) so equal networks
// have equal text, and bounded to what a JS number and viem's `chainId: number` represent exactly.
const NETWORK_PATTERN = /^eip155:[1-9][0-9]{0,15}$/;

function isNetworkText(text: string): text is Network {
  return NETWORK_PATTERN.test(text) && Number.isSafeInteger(Number(text.slice(7)));
}

/** A CAIP-2 `eip155:<chain id>` network. */
export const NetworkSchema = z
  .string()
  .refine(isNetworkText, { error: "expected a CAIP-2 network `eip155:<decimal chain id>`" })
  .transform((text) => text as Network);

/** True for canonical `eip155:<chain id>` text. */
export function isNetwork(value: unknown): value is Network {
  return typeof value === "string" && isNetworkText(value);
}

/** The EVM chain id of a network: `chainIdOf("eip155:8453") === 8453`. Throws `UnsupportedNetwork`. */
export function chainIdOf(network: string): number {
  if (!isNetwork(network)) {
    throw new TollgateError("UnsupportedNetwork", "expected a CAIP-2 network `eip155:<decimal chain id>`", {
      details: { network: String(network).slice(0, 100) },
    });
  }
  return Number(network.slice(7));
}

/** The network of an EVM chain id: `networkOf(31337) === "eip155:31337"`. Throws `UnsupportedNetwork`. */
export function networkOf(chainId: number): Network {
  if (!Number.isSafeInteger(chainId) || chainId <= 0) {
    throw new TollgateError("UnsupportedNetwork", "chain id must be a positive safe integer", {
      details: { chainId },
    });
  }
  return `eip155:${chainId}`;
}
