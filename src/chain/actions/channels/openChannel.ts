import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

export type OpenChannelParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  payee: Address;
  token: Address;
  amount: bigint;
  sessionKeyX: Hex;
  sessionKeyY: Hex;
  closeDelay: bigint;
  salt: Hex;
};

/** Opens a channel paid by the client itself under its token approval (`approveToken` first). Returns the transaction hash. */
export function openChannel(client: WriteClient, p: OpenChannelParameters): Promise<Hash> {
  return writeContract(client, {
    address: p.channels,
    abi: tollgateChannelsAbi,
    functionName: "open",
    args: [p.payee, p.token, p.amount, p.sessionKeyX, p.sessionKeyY, p.closeDelay, p.salt],
  });
}
