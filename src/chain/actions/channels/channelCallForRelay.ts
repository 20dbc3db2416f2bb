import type { Address, ContractFunctionArgs } from "viem";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";
import type { RelayedCall } from "../relayedCall.ts";
import { relayedCall } from "../relayedCall.ts";

/** The TollgateChannels calls the facilitator relays for a payer (gasless). */
export type ChannelRelayFunction =
  | "openWithAuthorization"
  | "topUpWithAuthorization"
  | "requestCloseFor"
  | "withdraw";

/**
 * A payer's channel call, relayed: an open or top-up carrying its EIP-3009 authorization, its signed
 * close request, or its withdrawal after the close delay. A refused authorization reverts in the token
 * with USDC's `Error(string)` message, which the simulation's error carries as its reason.
 * @example
 * const call = channelCallForRelay({ channels, functionName: "withdraw", args: [channelId] });
 * await publicClient.simulateContract({ ...call.simulation, account: relayer });
 * await send({ to: call.to, data: call.data });
 */
export function channelCallForRelay<functionName extends ChannelRelayFunction>(p: {
  channels: Address;
  functionName: functionName;
  args: ContractFunctionArgs<typeof tollgateChannelsAbi, "nonpayable", functionName>;
}): RelayedCall {
  return relayedCall({
    address: p.channels,
    abi: tollgateChannelsAbi,
    functionName: p.functionName,
    args: p.args,
  } as never);
}
