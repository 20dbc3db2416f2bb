import { decodeErrorResult, type Hex, type Log, parseEventLogs } from "viem";
import { batchSettlerAbi } from "../contracts/artifacts/BatchSettler.ts";
import { tollgateUsdAbi } from "../contracts/artifacts/TollgateUSD.ts";

export type SettlementOutcome = { from: Hex; nonce: Hex } & (
  | { ok: true }
  | { ok: false; reason: Hex; error?: string }
);

/**
 * The per-item outcomes of a BatchSettler.settle receipt, in item order. A failed item carries the raw
 * revert data and, when the token reverts with TollgateUSD's (or OpenZeppelin ERC-20) errors, the
 * error's name, e.g. `AuthorizationAlreadyUsed` or `ERC20InsufficientBalance`.
 */
export function decodeSettlerEvents(logs: Log[]): SettlementOutcome[] {
  return parseEventLogs({ abi: batchSettlerAbi, logs }).map((event) => {
    if (event.eventName === "Settled") return { from: event.args.from, nonce: event.args.nonce, ok: true };
    const { from, nonce, reason } = event.args;
    const error = revertErrorName(reason);
    return { from, nonce, ok: false, reason, ...(error === undefined ? {} : { error }) };
  });
}

function revertErrorName(data: Hex): string | undefined {
  try {
    return decodeErrorResult({ abi: tollgateUsdAbi, data }).errorName;
  } catch {
    return undefined;
  }
}
