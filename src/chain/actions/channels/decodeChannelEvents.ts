import { type Hex, type Log, parseEventLogs } from "viem";
import { tollgateChannelsAbi } from "../../contracts/artifacts/TollgateChannels.ts";

/** Why a claim item paid nothing: the contract's FAILURE_* constants by name. */
export const channelClaimFailures = {
  1: "NoChannel",
  2: "Closed",
  3: "NotPayee",
  4: "BadSignature",
  5: "AboveDeposit",
  6: "NothingNew",
  7: "TransferFailed",
} as const;
export type ChannelClaimFailure = (typeof channelClaimFailures)[keyof typeof channelClaimFailures];

export type ChannelClaimOutcome = { channelId: Hex; cumulativeAmount: bigint } & (
  | { ok: true; amount: bigint; payee: Hex }
  | { ok: false; reason: ChannelClaimFailure | "Unknown" }
);

/**
 * The per-item outcomes of a `claimMany` receipt, in item order, for the items it attempted
 * (`deferred` says from which index it stopped for lack of gas). Pass the logs of one receipt.
 */
export function decodeChannelClaims(logs: Log[]): {
  outcomes: ChannelClaimOutcome[];
  deferred: { firstIndex: number; count: number } | undefined;
} {
  const outcomes: ChannelClaimOutcome[] = [];
  let deferred: { firstIndex: number; count: number } | undefined;
  for (const event of parseEventLogs({ abi: tollgateChannelsAbi, logs })) {
    if (event.eventName === "ChannelClaimed") {
      const { channelId, cumulativeAmount, amount, payee } = event.args;
      outcomes.push({ channelId, cumulativeAmount, ok: true, amount, payee });
    } else if (event.eventName === "ClaimFailed") {
      const { channelId, cumulativeAmount, reason } = event.args;
      const name = channelClaimFailures[reason as keyof typeof channelClaimFailures] ?? "Unknown";
      outcomes.push({ channelId, cumulativeAmount, ok: false, reason: name });
    } else if (event.eventName === "ClaimsDeferred") {
      deferred = { firstIndex: Number(event.args.firstIndex), count: Number(event.args.count) };
    }
  }
  return { outcomes, deferred };
}
