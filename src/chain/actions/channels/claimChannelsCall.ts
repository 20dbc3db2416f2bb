import type { Address } from "viem";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";
import { contractCall, type TxCall } from "../txCall.ts";
import { type ChannelClaim, claimChannelsGasLimit } from "./claimChannels.ts";

/**
 * The `claimMany` call as a `TxCall` for the facilitator's outbox, with the gas limit of
 * `claimChannelsGasLimit` (never estimated: see `claimChannels`).
 */
export function claimChannelsCall({
  channels,
  claims,
}: {
  channels: Address;
  claims: readonly ChannelClaim[];
}): TxCall {
  return contractCall({
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "claimMany",
    args: [claims],
    gas: claimChannelsGasLimit(claims.length),
  });
}
