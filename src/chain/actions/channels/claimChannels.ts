import type { Address, Hash, Hex } from "viem";
import { writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

/** One voucher to claim: the channel, its cumulative amount and the session key's r ‖ s (64 bytes). */
export type ChannelClaim = { channelId: Hex; cumulativeAmount: bigint; signature: Hex };

export type ClaimChannelsParameters = {
  /** The TollgateChannels contract. */
  channels: Address;
  claims: readonly ChannelClaim[];
  /**
   * Gas limit; by default `claimChannelsGasLimit(claims.length)`. An estimate works too: the contract
   * refuses (`ClaimGasTooLow`) to start with less than its honest items need, so the lowest gas at which
   * the call succeeds attempts them all; the default adds room for items whose token burns gas.
   */
  gas?: bigint | undefined;
};

/** TollgateChannels' `ITEM_GAS_REQUIRED`: the gas left that an item needs before it is attempted. */
export const CHANNEL_CLAIM_ITEM_GAS_REQUIRED = (100_000n * 64n) / 63n + 50_000n + 40_000n;

/**
 * TollgateChannels' `ITEM_GAS_TYPICAL`: what `claimMany` needs left per item after the first before it
 * starts (else it reverts `ClaimGasTooLow`).
 */
export const CHANNEL_CLAIM_ITEM_GAS_TYPICAL = 80_000n;

/**
 * A gas limit under which every honest item of a claim batch is attempted: a fixed part, a generous
 * 90 000 per item (bench/gas.ts measures what one uses) and the room the last item needs.
 */
export function claimChannelsGasLimit(items: number): bigint {
  return 60_000n + 90_000n * BigInt(items) + CHANNEL_CLAIM_ITEM_GAS_REQUIRED;
}

/**
 * Claims the vouchers of many channels in one `claimMany`; the client must be each channel's payee or
 * its operator. Items fail alone (`decodeChannelEvents`). Returns the transaction hash.
 */
export function claimChannels(
  client: WriteClient,
  { channels, claims, gas }: ClaimChannelsParameters,
): Promise<Hash> {
  return writeContract(client, {
    address: channels,
    abi: tollgateChannelsAbi,
    functionName: "claimMany",
    args: [claims],
    gas: gas ?? claimChannelsGasLimit(claims.length),
  });
}
