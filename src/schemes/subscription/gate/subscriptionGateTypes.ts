/**
 * The subscription gate's types (createSubscriptionGate.ts): what it is asked, what it answers and
 * its options. Apart from the gate, so that its parts name them without importing the gate.
 */
import type { Address } from "viem";
import type { GateLogger } from "../../../gate/gateLogger.ts";
import type { RouteRequest } from "../../../gate/gateRequest.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { PlanCatalog } from "./createPlanCatalog.ts";
import type { SubAuthVerifier } from "./createSubAuthVerifier.ts";
import type { UsageFlusher } from "./usage/createUsageFlusher.ts";
import type { UsageLedger } from "./usage/usageLedger.ts";
import type { WalletSubAuthCheck } from "./walletSubAuth.ts";

/** A subscription the gate served a request under (`GateResult.subscription`). */
export type GateSubscription = {
  subscriptionId: bigint;
  subscriber: Address;
  planId: string;
  /** Metered units this request used (0 on an unmetered route). */
  units: number;
  /** Units counted in the current cycle after this request (metered routes). */
  unitsUsed: bigint | undefined;
  /** Overage charged for this request past the included units, smallest unit (0 within them). */
  charge: bigint;
};

/** A handler's charge against a subscription's allowance, as accepted (settled later, in a batch). */
export type AllowanceDeduction = { subscriptionId: bigint; amount: bigint };

/** What the gate knows of a route that accepts subscriptions. */
export type SubscriptionRoute = {
  /** The plans (ids in canonical decimal) whose subscriptions this route serves. */
  offers: readonly { planId: string }[];
  /** Metered units per use; `undefined` = 1 when a plan meters, `0` = never metered. */
  units: number | ((request: RouteRequest) => number) | undefined;
};

export type SubscriptionOutcome =
  | { kind: "pass"; subscription: GateSubscription }
  | {
      kind: "refuse";
      error: "SubscriptionAuthInvalid" | "SubscriptionNotActive" | "AllowanceExhausted" | "PaymentRequired";
      message: string;
    }
  | { kind: "busy"; message: string; retryAfter: number };

export type SubscriptionGate = {
  check(request: {
    subscriptionId: string;
    token: string | null;
    route: SubscriptionRoute;
    routeRequest: RouteRequest;
  }): SubscriptionOutcome | Promise<SubscriptionOutcome>;
  /** Applies every facilitator event recorded so far (status and plan invalidations, settled usage). */
  syncEvents(): Promise<void>;
  /** Sends pending metered charges to the facilitator now, then looks up outcomes of older ones. */
  flushUsage(): Promise<number>;
  /**
   * Charges `amount` (smallest unit) against the subscription's overage cap this cycle, through the
   * usage ledger (settled on chain in batches, like metered use): `deductAllowance` of a handler.
   * Throws `AllowanceExhausted` when it does not fit the cap, `RateLimited` past the gate's unsettled
   * bound, `SubscriptionNotActive` for a subscription no longer active.
   */
  deduct(subscriptionId: bigint, amount: bigint): Promise<AllowanceDeduction>;
  /** Drops one subscription's cached state. */
  invalidate(subscriptionId: string): void;
  /** Stops the background work and sends what is pending. */
  close(): Promise<void>;
};

export type SubscriptionGateOptions = {
  facilitator: Pick<FacilitatorClient, "request">;
  plans: PlanCatalog;
  payTo: Address;
  /** The gate's public origin: the `aud` of every token. */
  audience: string;
  clock: Clock;
  /** Decimals of the gate's token, for amounts in messages. */
  decimals: number;
  statusTtlMs: number;
  /**
   * Chain seconds an Active subscription is still served after its paid period ended while its
   * renewal is not collected (see `isRenewalOverdue`).
   */
  renewalGraceSeconds: number;
  /** Event-feed poll interval; 0 = poll only on `syncEvents()`. */
  eventPollMs: number;
  /**
   * The provider's API key, which the facilitator's event feed requires. Without one no events are
   * read: cached statuses then live out `statusTtlMs`, and `syncEvents()` does nothing.
   */
  providerApiKey?: string | undefined;
  metering:
    | {
        ledger: UsageLedger;
        flusher: UsageFlusher | undefined;
        maxUnsettled: bigint;
        retryAfterSeconds: number;
      }
    | undefined;
  logger?: GateLogger | undefined;
  /** For tests: replaces the token verifier. */
  verifier?: SubAuthVerifier | undefined;
  /**
   * Checks a token whose signer is not the subscriber with the subscriber's ERC-1271
   * `isValidSignature` (walletSubAuth.ts). Without it a smart-contract wallet's tokens are refused.
   */
  walletSubAuth?: WalletSubAuthCheck | undefined;
};
