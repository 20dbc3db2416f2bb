import type { Address, Hash } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type SetChannelOperatorParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  operator: Address;
  allowed: boolean;
};

/** Lets (or stops) an operator, such as a facilitator, claim and close the client's channels as payee. Returns the transaction hash. */
export function setChannelOperator(
  client: WriteClient,
  { channels, operator, allowed }: SetChannelOperatorParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "setOperator",
    args: [operator, allowed],
  });
}
