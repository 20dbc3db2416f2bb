import { decodeErrorResult, getAddress, type Hex, type Log } from "viem";
import { batchSettlerAbi } from "../contracts/artifacts/BatchSettler.ts";
import { fiatTokenRevertName } from "./fiatTokenRevertNames.ts";
import { readSettlerLogs } from "./settlerLogs.ts";

export type SettlementOutcome = { from: Hex; nonce: Hex } & (
  | { ok: true }
  | {
      ok: false;
      reason: Hex;
      /** The error's name; a FiatToken (USDC) message is given its name from `fiatTokenRevertName`. */
      error?: string;
      /** The revert's own `Error(string)` message, when the token reverted with one. */
      message?: string;
    }
);

/**
 * The per-item outcomes of a BatchSettler.settle receipt, in item order, for the items it attempted (see
 * `decodeSettlerDeferred` for the ones it did not). A failed item carries the raw revert data (at most
 * 256 bytes of it) and the error's name. A revert with an `Error(string)` message (Circle's FiatToken)
 * carries the message, and as its name the one `fiatTokenRevertName` gives it, e.g.
 * `AuthorizationAlreadyUsed`, or `Error` for a message not in that table; an item that ran out of its gas
 * is `ItemOutOfGas`.
 * Pass the logs of one receipt; anyone can make a BatchSettler emit events for a token of their own.
 */
export function decodeSettlerEvents(logs: Log[]): SettlementOutcome[] {
  const outcomes: SettlementOutcome[] = [];
  for (const event of readSettlerLogs(logs)) {
    if (event.eventName === "Settled") {
      outcomes.push({ from: getAddress(event.from), nonce: event.nonce, ok: true });
    } else if (event.eventName === "SettleFailed") {
      const { nonce, reason } = event;
      const { error, message } = decodeRevertReason(reason);
      outcomes.push({
        from: getAddress(event.from),
        nonce,
        ok: false,
        reason,
        ...(error === undefined ? {} : { error }),
        ...(message === undefined ? {} : { message }),
      });
    }
  }
  return outcomes;
}

/** The items a settle call left unattempted for lack of gas (`Deferred`), or `undefined` when none. */
export function decodeSettlerDeferred(logs: Log[]): { firstIndex: number; count: number } | undefined {
  for (const event of readSettlerLogs(logs)) {
    if (event.eventName === "Deferred")
      return { firstIndex: Number(event.firstIndex), count: Number(event.count) };
  }
  return undefined;
}

const revertAbi = batchSettlerAbi.filter((item) => item.type === "error");

function decodeRevertReason(data: Hex): { error?: string; message?: string } {
  try {
    // viem adds Solidity's built-in `Error(string)` and `Panic(uint256)` to the ABI it decodes with.
    const decoded = decodeErrorResult({ abi: revertAbi, data });
    const name: string = decoded.errorName;
    const args = decoded.args as readonly unknown[] | undefined;
    if (name === "Error" && typeof args?.[0] === "string") {
      const message = args[0];
      return { error: fiatTokenRevertName(message) ?? "Error", message };
    }
    return { error: name };
  } catch {
    return {};
  }
}
