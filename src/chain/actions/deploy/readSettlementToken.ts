import { type Address, type Client, domainSeparator, getAddress, size } from "viem";
import { getCode, readContract } from "viem/actions";
import { TollgateError } from "../../../protocol/errors.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

export type ReadSettlementTokenParameters = {
  /** The token: USDC (FiatToken) or another EIP-3009 token with `name()`, `version()` and `DOMAIN_SEPARATOR()`. */
  token: Address;
};

export type SettlementToken = {
  address: Address;
  /** The EIP-712 domain's name and version, which every transfer authorization commits to. */
  name: string;
  version: string;
  symbol: string;
  decimals: number;
};

/**
 * Reads a settlement token's EIP-712 domain from the chain and checks it: `DOMAIN_SEPARATOR()` must be
 * the separator of {name(), version(), the client's chain id, the token's address}, or authorizations
 * signed under the domain read here would never verify. Throws `UnsupportedToken` when the address holds
 * no code, does not answer those calls, or signs under another domain.
 *
 * @example
 * const usdc = await readSettlementToken(publicClient, { token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e" });
 */
export async function readSettlementToken(
  client: Client,
  { token }: ReadSettlementTokenParameters,
): Promise<SettlementToken> {
  const address = getAddress(token);
  const code = await getCode(client, { address });
  if (code === undefined || size(code) === 0) {
    throw new TollgateError("UnsupportedToken", `the token ${address} has no code on this chain`, {
      details: { token: address },
    });
  }
  const read = <F extends "name" | "version" | "symbol" | "decimals" | "DOMAIN_SEPARATOR">(functionName: F) =>
    readContract(client, { address, abi: fiatTokenV2_2Abi, functionName });
  let values: [string, string, string, number, `0x${string}`, number];
  try {
    values = await Promise.all([
      read("name"),
      read("version"),
      read("symbol"),
      read("decimals"),
      read("DOMAIN_SEPARATOR"),
      client.request({ method: "eth_chainId" }).then(Number),
    ]);
  } catch (error) {
    throw new TollgateError(
      "UnsupportedToken",
      `the token ${address} does not answer name(), version(), symbol(), decimals() and DOMAIN_SEPARATOR(): it cannot be an EIP-3009 settlement token`,
      { details: { token: address }, cause: error },
    );
  }
  const [name, version, symbol, decimals, separator, chainId] = values;
  const expected = domainSeparator({ domain: { name, version, chainId, verifyingContract: address } });
  if (separator.toLowerCase() !== expected.toLowerCase()) {
    throw new TollgateError(
      "UnsupportedToken",
      `the token ${address} signs under another EIP-712 domain than {name "${name}", version "${version}", chain ${chainId}, its own address}: its DOMAIN_SEPARATOR() is ${separator}, expected ${expected}`,
      { details: { token: address, name, version, chainId, domainSeparator: separator, expected } },
    );
  }
  return { address, name, version, symbol, decimals };
}
