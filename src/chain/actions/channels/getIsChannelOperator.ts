import type { Address } from "viem";
import type { ReadClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type GetIsChannelOperatorParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  payee: Address;
  operator: Address;
};

/** True when `operator` may claim and close `payee`'s channels. */
export function getIsChannelOperator(
  client: ReadClient,
  { channels, payee, operator }: GetIsChannelOperatorParameters,
): Promise<boolean> {
  return client.readContract({
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "isOperator",
    args: [payee, operator],
  });
}
