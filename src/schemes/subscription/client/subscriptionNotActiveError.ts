/**
 * The error `fetchWithPayment` throws when a gate refuses the subscription a payer holds for its
 * origin with `SubscriptionNotActive` and the caller has not allowed paying once instead. It names
 * the subscription and its state, so the caller can resume it, pay its renewal, or opt into one-time
 * payments (`onSubscriptionInactive: "pay-once"`), rather than being charged per call unawares.
 */

import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { getSubscriptionInfo } from "./facilitatorSubscriptions.ts";

/**
 * Why a subscription is not served: its on-chain status (`Paused`, `PastDue`, `Cancelled`),
 * `RenewalOverdue` (Active on chain, but its paid period ended longer ago than the gate's grace: no
 * renewal collected yet), `NotFound`, or `Unknown` when the facilitator could not be asked.
 */
export type InactiveSubscriptionState =
  | "Paused"
  | "PastDue"
  | "Cancelled"
  | "RenewalOverdue"
  | "NotFound"
  | "Unknown";

export class SubscriptionNotActiveError extends TollgateError {
  override readonly name: string = "SubscriptionNotActiveError";
  readonly subscriptionId: bigint;
  readonly state: InactiveSubscriptionState;

  constructor(p: { subscriptionId: bigint; state: InactiveSubscriptionState; url: string; message: string }) {
    super(
      "SubscriptionNotActive",
      `the gate refused subscription ${p.subscriptionId} (${p.state}): ${p.message}; resume or renew it, or allow one-time payments with onSubscriptionInactive: "pay-once"`,
      { details: { subscriptionId: p.subscriptionId.toString(), state: p.state, url: p.url } },
    );
    this.subscriptionId = p.subscriptionId;
    this.state = p.state;
  }
}

/** The subscription's state as the facilitator reads it from the chain now; `Unknown` if it cannot. */
export async function inactiveStateOf(
  facilitator: Partial<Pick<FacilitatorClient, "request">>,
  subscriptionId: bigint,
  signal?: AbortSignal,
): Promise<InactiveSubscriptionState> {
  const { request } = facilitator;
  if (typeof request !== "function") return "Unknown";
  let info: SubscriptionInfo;
  try {
    info = await getSubscriptionInfo({ request: request.bind(facilitator) }, subscriptionId, { signal });
  } catch (error) {
    if (error instanceof TollgateError && error.code === "NotFound") return "NotFound";
    return "Unknown";
  }
  // The gate refuses an Active subscription only when its renewal is overdue (docs/gate.md).
  return info.status === "Active" ? "RenewalOverdue" : info.status;
}
