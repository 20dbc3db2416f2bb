import type { Address, Hex } from "viem";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";
import { contractCall, type TxCall } from "../txCall.ts";

/** Gas for a cooperative close: a claim and a refund, two token transfers (bench/gas.ts measures ~90 000). */
export const CLOSE_CHANNEL_GAS = 250_000n;

/** `closeWithVoucher` as a `TxCall` for the facilitator's outbox. */
export function closeChannelWithVoucherCall(p: {
  channels: Address;
  channelId: Hex;
  cumulativeAmount: bigint;
  signature: Hex;
}): TxCall {
  return contractCall({
    address: p.channels,
    abi: tollgateChannelsAbi,
    functionName: "closeWithVoucher",
    args: [p.channelId, p.cumulativeAmount, p.signature],
    gas: CLOSE_CHANNEL_GAS,
  });
}
