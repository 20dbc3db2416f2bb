/**
 * Signatures of payers with code — smart-contract wallets (ERC-1271) and EIP-7702 delegated accounts —
 * checked through the chain, for the signatures that the cheap local recovery did not already accept.
 *
 * Invariants:
 * - Callers recover first and come here only when the signature does not recover to the address it is
 *   for; an EOA paying with its own key never costs a chain read.
 * - Every read is bounded: one `eth_getCode` per address and cache period, and one `eth_call` of
 *   `isValidSignature` capped at ERC1271_CHECK_GAS gas, so a "wallet" that burns gas or reverts costs
 *   the node at most that and is refused.
 * - Only a refusal is ever decided by the cache. "Has code" is remembered per address for
 *   `codeTtlSeconds`, "has no code" for `noCodeTtlSeconds` (shorter): an EOA can gain code at any time
 *   (an EIP-7702 delegation) and lose it again. A stale "no code" refuses a freshly delegated account's
 *   wallet signature for at most that long (it is accepted once the entry expires); a stale "has code"
 *   costs only the `eth_call`, which answers no for an address whose code is gone.
 * - The cache holds at most `maxAddresses` entries, the oldest dropped first, so junk addresses cannot
 *   grow it without bound.
 */
import type { Address, Hex, PublicClient } from "viem";
import { isValidErc1271Signature } from "../chain/signers/isValidErc1271Signature.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { chainUnavailable, isChainUnreachable } from "./chainErrors.ts";

export type ContractSigners = {
  /**
   * Whether `address` has code and its `isValidSignature` accepts `signature` over `hash`. False for an
   * address without code. Throws `ChainUnavailable` when the node cannot be reached.
   */
  isValidSignature(address: Address, hash: Hex, signature: Hex): Promise<boolean>;
};

export type ContractSignersOptions = {
  client: Pick<PublicClient, "request" | "getCode">;
  clock: Clock;
  /** Seconds an address found with code is remembered as such (default 600). */
  codeTtlSeconds?: number | undefined;
  /** Seconds an address found without code is remembered as such (default 30). */
  noCodeTtlSeconds?: number | undefined;
  /** Addresses remembered (default 10 000). */
  maxAddresses?: number | undefined;
};

export function createContractSigners(options: ContractSignersOptions): ContractSigners {
  const { client, clock } = options;
  const codeTtl = options.codeTtlSeconds ?? 600;
  const noCodeTtl = options.noCodeTtlSeconds ?? 30;
  const maxAddresses = options.maxAddresses ?? 10_000;
  // Insertion-ordered: the first key is the oldest entry.
  const code = new Map<string, { hasCode: boolean; until: number }>();

  async function hasCode(address: Address): Promise<boolean> {
    const key = address.toLowerCase();
    const now = unixSeconds(clock);
    const cached = code.get(key);
    if (cached !== undefined && cached.until > now) return cached.hasCode;
    const found = await client.getCode({ address }).catch((error: unknown) => {
      throw isChainUnreachable(error) ? chainUnavailable(error) : error;
    });
    const result = found !== undefined && found !== "0x";
    code.delete(key);
    if (code.size >= maxAddresses) {
      const oldest = code.keys().next();
      if (oldest.done !== true) code.delete(oldest.value);
    }
    code.set(key, { hasCode: result, until: now + (result ? codeTtl : noCodeTtl) });
    return result;
  }

  return {
    async isValidSignature(address, hash, signature) {
      if (!(await hasCode(address))) return false;
      try {
        return await isValidErc1271Signature(client, { address, hash, signature });
      } catch (error) {
        throw chainUnavailable(error);
      }
    },
  };
}
