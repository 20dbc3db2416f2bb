/**
 * What the subscription gate's steps share (createSubscriptionGate.ts): its options, the token verifier,
 * the status cache, the exhaustion reports and the parsed numbers of each state read. Built once by
 * `createSubscriptionGate`; the steps (subscriptionUse.ts, subscriptionCheck.ts,
 * deductSubscriptionAllowance.ts) are module functions given it.
 */
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import type { SubAuthVerifier } from "./createSubAuthVerifier.ts";
import type { SubscriptionStatusCache } from "./createSubscriptionStatusCache.ts";
import type { ExhaustionReports } from "./exhaustionReports.ts";
import type { SubscriptionGateOptions, SubscriptionOutcome } from "./subscriptionGateTypes.ts";

/** A state's numbers as the ledger reads them. */
export type StateNumbers = { id: bigint; maxOverage: bigint; overageUsed: bigint };

export type SubscriptionGateContext = {
  options: SubscriptionGateOptions;
  verifier: SubAuthVerifier;
  statuses: SubscriptionStatusCache;
  exhaustion: ExhaustionReports;
  /** A state's numbers, parsed once per state read from the facilitator. */
  parsed: WeakMap<SubscriptionInfo, StateNumbers>;
};

/** A use the cap has room for only on other instances' live leases (leased shared ledgers). */
export const LEASED_MESSAGE =
  "this subscription's remaining allowance is held by other instances of this API for a moment; retry shortly";

/** A cap reached is re-read from the chain at most this often per subscription before refusing. */
export const EXHAUSTED_REFRESH_MS = 1_000;

export const refuse = (error: Extract<SubscriptionOutcome, { kind: "refuse" }>["error"], message: string) =>
  ({ kind: "refuse", error, message }) as const;
