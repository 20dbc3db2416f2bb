import type { Address, ContractFunctionArgs } from "viem";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";
import { tollgateUsdAbi } from "../../contracts/artifacts/TollgateUSD.ts";
import type { RelayedCall } from "../relayedCall.ts";
import { relayedCall } from "../relayedCall.ts";

/** The channel contract's ABI plus the token's errors: a relayed call's revert may come from either. */
export const channelRevertAbi = [
  ...tollgateChannelsAbi,
  ...tollgateUsdAbi.filter(
    (item) =>
      item.type === "error" &&
      !tollgateChannelsAbi.some((own) => own.type === "error" && own.name === item.name),
  ),
] as const;

/** The TollgateChannels calls the facilitator relays for a payer (gasless). */
export type ChannelRelayFunction =
  | "openWithAuthorization"
  | "topUpWithAuthorization"
  | "requestCloseFor"
  | "withdraw";

/**
 * A payer's channel call, relayed: an open or top-up carrying its EIP-3009 authorization, its signed
 * close request, or its withdrawal after the close delay. The simulation decodes the token's errors
 * too (`channelRevertAbi`), so a refused authorization reads as the token's revert.
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
  const call = relayedCall({
    address: p.channels,
    abi: tollgateChannelsAbi,
    functionName: p.functionName,
    args: p.args,
  } as never);
  return { ...call, simulation: { ...call.simulation, abi: channelRevertAbi } };
}
