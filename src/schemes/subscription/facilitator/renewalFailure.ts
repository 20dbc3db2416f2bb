/**
 * Why a renewal failed, from the revert data the SubscriptionManager keeps in `RenewalFailed.reason`:
 * the token's refusal (USDC's `Error(string)` messages, named through the same table as a settlement's,
 * chainErrors.ts), or the manager's own `SpendLimitReached`. Subscription records, the API and the
 * `subscription.renewal_failed` event carry this instead of bare revert bytes.
 */
import { decodeErrorResult, type Hex } from "viem";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { decodeRevert, refusalFromRevert } from "../../../facilitator/chainErrors.ts";
import type { ErrorCode } from "../../../protocol/errors.ts";

export type RenewalFailure = { code: ErrorCode; message: string };

/** The decoded reason of a failed pull; a reason nothing recognises is `InvalidRequest` with its bytes. */
export function renewalFailureOf(reason: Hex): RenewalFailure {
  if (decodeRevert(reason) !== undefined) {
    const refusal = refusalFromRevert(reason);
    return { code: refusal.code, message: refusal.message };
  }
  if (reason === "0x") {
    // `_tryPull`: the token returned false or something other than true, or has no code.
    return { code: "InvalidRequest", message: "the token refused the pull without saying why" };
  }
  try {
    const { errorName } = decodeErrorResult({ abi: subscriptionManagerAbi, data: reason });
    if (errorName === "SpendLimitReached") {
      return {
        code: "InsufficientFunds",
        message: "the renewal would pass the spend limit the subscriber signed",
      };
    }
    return { code: "InvalidRequest", message: `the SubscriptionManager refused the renewal: ${errorName}` };
  } catch {
    return { code: "InvalidRequest", message: `the chain refused the renewal (revert data ${reason})` };
  }
}
