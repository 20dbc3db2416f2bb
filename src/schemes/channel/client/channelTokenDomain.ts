/**
 * The EIP-712 domain of a token a channel is funded in: named by the payer's `tokenDomain`, else read
 * once from the facilitator's `GET /supported` (read again after a failed read).
 */
import type { Address } from "viem";
import type { TokenDomain } from "../../../chain/signers/eip712Types.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { ChannelWalletOptions } from "./channelWalletTypes.ts";

export type ChannelTokenDomainOf = (token: Address) => Promise<TokenDomain>;

export function createChannelTokenDomainOf(
  options: Pick<ChannelWalletOptions, "tokenDomain" | "facilitator" | "network">,
  chainId: number,
): ChannelTokenDomainOf {
  let supported: Promise<Awaited<ReturnType<FacilitatorClient["supported"]>>> | undefined;
  return async function tokenDomainOf(token) {
    let named: { name: string; version: string } | undefined;
    if (options.tokenDomain !== undefined) named = await options.tokenDomain(token);
    else {
      supported ??= options.facilitator.supported().catch((error: unknown) => {
        supported = undefined;
        throw error;
      });
      named = (await supported).networks
        .find((n) => n.network === options.network)
        ?.tokens.find((t) => sameAddress(t.address, token))?.eip712;
    }
    if (named === undefined) {
      throw new TollgateError(
        "UnsupportedToken",
        "the facilitator does not settle this token on this network",
        {
          details: { token, network: options.network },
        },
      );
    }
    return { name: named.name, version: named.version, chainId, verifyingContract: token };
  };
}
