/**
 * The subscription side of `paymentGate` (docs/protocol.md, "Subscription requests"; docs/gate.md): decides whether a request carrying
 * `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` is served under a subscription, and meters it.
 *
 * Order of checks, cheapest and most local first:
 * 1. the id is a canonical decimal and a token is present;
 * 2. the token (cached by its text until `exp`): well-formed, `aud` = the gate's public origin, issued
 *    for this id, unexpired, at most an hour long — all before its signature is recovered, once per
 *    token, never per request;
 * 3. the subscription's state (cached, `statusTtlMs`, dropped on facilitator events): it exists, its
 *    subscriber is the token's signer, its plan is one of this route's plans (all sold by this gate's
 *    `payTo` in its token), and it is Active with its renewal not overdue (`renewalGraceSeconds`);
 * 4. on a metered route, the use is reserved in the usage ledger against the included units, the
 *    subscription's overage cap and the gate's bound on unsettled usage.
 *
 * Refusals are data (`refuse`, answered with a fresh 402; `busy`, answered 429); faults (facilitator
 * unreachable, ledger down) are thrown and answered 5xx by the gate, so a subscriber is never told its
 * subscription is invalid when the gate merely could not check it.
 *
 * Its parts, module functions over one context (subscriptionGateContext.ts): `check`
 * (subscriptionCheck.ts), the decision and the ledger's reservation (subscriptionUse.ts), `deduct`
 * (deductSubscriptionAllowance.ts), the event feed (subscriptionGateEvents.ts) and the reports of
 * exhaustion (exhaustionReports.ts).
 */
import type { Address } from "viem";
import type { GateLogger } from "../../../gate/gateLogger.ts";
import type { RouteRequest } from "../../../gate/gateRequest.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import type { PlanCatalog } from "./createPlanCatalog.ts";
import { createSubAuthVerifier, type SubAuthVerifier } from "./createSubAuthVerifier.ts";
import {
  createSubscriptionStatusCache,
  type SubscriptionStatusCache,
} from "./createSubscriptionStatusCache.ts";
import { deductSubscriptionAllowance } from "./deductSubscriptionAllowance.ts";
import { createExhaustionReports } from "./exhaustionReports.ts";
import { checkSubscription } from "./subscriptionCheck.ts";
import type { SubscriptionGateContext } from "./subscriptionGateContext.ts";
import { createGateEventPoller } from "./subscriptionGateEvents.ts";
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

export function createSubscriptionGate(options: SubscriptionGateOptions): SubscriptionGate {
  const { facilitator, clock, metering } = options;
  const verifier = options.verifier ?? createSubAuthVerifier({ audience: options.audience, clock });
  const statuses: SubscriptionStatusCache = createSubscriptionStatusCache({
    read: (id) => getSubscriptionInfo(facilitator, id, { timeoutMs: 10_000 }),
    clock,
    ttlMs: options.statusTtlMs,
    // Refreshed in the background from ¾ of its TTL on, so requests in steady use never wait for it.
    refreshAfterMs: (options.statusTtlMs * 3) / 4,
  });
  const poller = createGateEventPoller(options, statuses);
  const ctx: SubscriptionGateContext = {
    options,
    verifier,
    statuses,
    exhaustion: createExhaustionReports(options),
    parsed: new WeakMap(),
  };
  let started = false;
  const startBackground = () => {
    if (started) return;
    started = true;
    poller.start();
    metering?.flusher?.start();
  };

  return {
    check(request) {
      startBackground();
      return checkSubscription(ctx, request);
    },
    deduct: (subscriptionId, amount) => deductSubscriptionAllowance(ctx, subscriptionId, amount),
    syncEvents: () => poller.pollOnce(),
    async flushUsage() {
      const flusher = metering?.flusher;
      if (flusher === undefined) return 0;
      await metering?.ledger.returnLeases?.();
      const sent = await flusher.flush();
      await flusher.reconcile();
      return sent;
    },
    invalidate: (id) => statuses.invalidate(id),
    async close() {
      await poller.stop();
      await metering?.ledger.returnLeases?.();
      await metering?.flusher?.stop();
    },
  };
}
