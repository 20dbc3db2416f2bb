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
 */
import type { Address } from "viem";
import type { GateLogger } from "../../../gate/gateLogger.ts";
import type { RouteRequest } from "../../../gate/gateRequest.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { formatUnitsExact } from "../../../protocol/amount.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { SubscriptionIdSchema } from "../../../protocol/subscriptionAuth.ts";
import type { FeedEvent, SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import { createEventPoller, type EventPoller } from "./createEventPoller.ts";
import type { GatePlan, PlanCatalog } from "./createPlanCatalog.ts";
import { createSubAuthVerifier, type SubAuthVerifier } from "./createSubAuthVerifier.ts";
import {
  createSubscriptionStatusCache,
  isRenewalOverdue,
  renewalOverdueMessage,
  type SubscriptionStatusCache,
} from "./createSubscriptionStatusCache.ts";
import type { UsageFlusher } from "./usage/createUsageFlusher.ts";
import { reportAllowanceExhausted } from "./usage/postUsage.ts";
import type { Reservation, UsageLedger, UsageRequest } from "./usage/usageLedger.ts";
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

/** The poller of a gate without a provider API key: the event feed would refuse it. */
const idlePoller: EventPoller = {
  cursor: undefined,
  pollOnce: () => Promise.resolve(),
  start() {},
  stop: () => Promise.resolve(),
};

/** Cycles whose exhaustion this gate remembers having reported (oldest forgotten first). */
const MAX_EXHAUSTION_REPORTS = 10_000;

/** A use the cap has room for only on other instances' live leases (leased shared ledgers). */
const LEASED_MESSAGE =
  "this subscription's remaining allowance is held by other instances of this API for a moment; retry shortly";

/** A canonical decimal below 10^16: a valid `SubscriptionIdSchema` value. */
const SHORT_ID = /^(?:0|[1-9][0-9]{0,15})$/;

/** A cap reached is re-read from the chain at most this often per subscription before refusing. */
const EXHAUSTED_REFRESH_MS = 1_000;

export function createSubscriptionGate(options: SubscriptionGateOptions): SubscriptionGate {
  const { facilitator, plans, payTo, clock, logger, metering } = options;
  const verifier = options.verifier ?? createSubAuthVerifier({ audience: options.audience, clock });
  const statuses: SubscriptionStatusCache = createSubscriptionStatusCache({
    read: (id) => getSubscriptionInfo(facilitator, id, { timeoutMs: 10_000 }),
    clock,
    ttlMs: options.statusTtlMs,
    // Refreshed in the background from ¾ of its TTL on, so requests in steady use never wait for it.
    refreshAfterMs: (options.statusTtlMs * 3) / 4,
  });

  const onEvent = async (event: FeedEvent): Promise<void> => {
    const data = event.data;
    const subscriptionId = typeof data.subscriptionId === "string" ? data.subscriptionId : undefined;
    if (event.type.startsWith("subscription.") && subscriptionId !== undefined) {
      statuses.invalidate(subscriptionId);
    } else if (event.type === "plan.deprecated" && typeof data.planId === "string") {
      plans.invalidate(data.planId);
    } else if (event.type === "allowance.deducted" || event.type === "allowance.exhausted") {
      if (subscriptionId !== undefined) statuses.invalidate(subscriptionId);
      const ref = typeof data.usageRef === "string" ? data.usageRef : undefined;
      if (ref !== undefined && metering !== undefined) {
        const outcome = event.type === "allowance.deducted" ? "settled" : "failed";
        // Awaited, so `syncEvents()` resolves only once the exposure is lowered. A failure is logged;
        // the flusher's reconciliation looks the charge up again later.
        await metering.ledger.resolve([{ ref, outcome }]).catch((error: unknown) => {
          logger?.warn({ err: error, ref }, "settled usage could not be recorded in the usage ledger");
        });
      }
    }
  };
  const poller: EventPoller =
    options.providerApiKey === undefined
      ? idlePoller
      : createEventPoller({
          facilitator,
          provider: payTo,
          apiKey: options.providerApiKey,
          onEvent,
          intervalMs: options.eventPollMs,
          logger,
        });
  let started = false;
  const startBackground = () => {
    if (started) return;
    started = true;
    poller.start();
    metering?.flusher?.start();
  };

  const refuse = (error: Extract<SubscriptionOutcome, { kind: "refuse" }>["error"], message: string) =>
    ({ kind: "refuse", error, message }) as const;

  const unitsOf = (route: SubscriptionRoute, plan: GatePlan, request: RouteRequest): number => {
    if (plan.includedUnits === 0n && plan.overageUnitPrice === 0n) return 0;
    const units = typeof route.units === "function" ? route.units(request) : (route.units ?? 1);
    if (!Number.isSafeInteger(units) || units < 0) {
      throw new TollgateError(
        "Internal",
        `the route's units function returned ${String(units)}, not a whole number`,
      );
    }
    return units;
  };

  /**
   * Tells the facilitator (`POST /usage/exhausted`) that a call was refused at the cap, so that it
   * emits `allowance.exhausted`: once per subscription and cycle from this gate (the facilitator
   * de-duplicates across instances too), in the background, never delaying the refusal. A report that
   * fails is forgotten, so a later refusal tries again. Needs the provider API key.
   */
  const reported = new Set<string>();
  const reportExhausted = (info: SubscriptionInfo, amount: bigint) => {
    const apiKey = options.providerApiKey;
    if (apiKey === undefined) return;
    const key = `${info.subscriptionId}:${info.periodStart}`;
    if (reported.has(key)) return;
    if (reported.size >= MAX_EXHAUSTION_REPORTS) reported.delete(reported.values().next().value as string);
    reported.add(key);
    reportAllowanceExhausted(
      facilitator,
      { apiKey, subscriptionId: BigInt(info.subscriptionId), amount },
      { timeoutMs: 10_000 },
    ).catch((error: unknown) => {
      reported.delete(key);
      logger?.warn(
        { err: error, subscriptionId: info.subscriptionId },
        "allowance exhaustion could not be reported",
      );
    });
  };

  /** The refusal of a use at the cap; reports it to the facilitator on the way. */
  const exhausted = (info: SubscriptionInfo, plan: GatePlan, unitsUsed: bigint, charge: bigint) => {
    reportExhausted(info, charge);
    return plan.overageUnitPrice === 0n && charge === 0n
      ? `subscription ${info.subscriptionId} has used the ${plan.includedUnits} units its plan includes this period, and the plan has no overage: upgrade the plan or wait for the renewal`
      : `subscription ${info.subscriptionId} has reached its overage cap of ${formatUnitsExact(BigInt(info.maxOverage), options.decimals)} this period (${unitsUsed} units used, ${plan.includedUnits} included): raise the cap (payer.setMaxOverage) or upgrade the plan`;
  };

  /** A state's numbers as the ledger reads them, parsed once per state read from the facilitator. */
  const parsed = new WeakMap<SubscriptionInfo, { id: bigint; maxOverage: bigint; overageUsed: bigint }>();
  const numbersOf = (info: SubscriptionInfo) => {
    let numbers = parsed.get(info);
    if (numbers === undefined) {
      numbers = {
        id: BigInt(info.subscriptionId),
        maxOverage: BigInt(info.maxOverage),
        overageUsed: BigInt(info.overageUsed),
      };
      parsed.set(info, numbers);
    }
    return numbers;
  };

  const usageRequest = (
    info: SubscriptionInfo,
    plan: GatePlan,
    units: number,
    maxUnsettled: bigint,
    charge?: bigint,
  ): UsageRequest => {
    const numbers = numbersOf(info);
    return {
      charge,
      subscriptionId: numbers.id,
      periodStart: info.periodStart,
      periodEnd: info.currentPeriodEnd,
      units,
      includedUnits: plan.includedUnits,
      unitPrice: plan.overageUnitPrice,
      maxOverage: numbers.maxOverage,
      overageUsed: numbers.overageUsed,
      maxUnsettled,
    };
  };

  const reserve = (
    info: SubscriptionInfo,
    plan: GatePlan,
    units: number,
    ledger: UsageLedger,
    maxUnsettled: bigint,
    charge?: bigint,
  ) => ledger.reserve(usageRequest(info, plan, units, maxUnsettled, charge));

  const pass = (
    info: SubscriptionInfo,
    units: number,
    unitsUsed: bigint | undefined,
    charge: bigint,
  ): SubscriptionOutcome => ({
    kind: "pass",
    subscription: {
      subscriptionId: numbersOf(info).id,
      subscriber: info.subscriber,
      planId: info.planId,
      units,
      unitsUsed,
      charge,
    },
  });

  type CheckRequest = Parameters<SubscriptionGate["check"]>[0];

  /**
   * The checks once the token's signer, the subscription's state and its plan are known and match
   * the route: status, renewal, units and, on a metered route, the reservation. Without a promise
   * when the ledger answers from memory.
   */
  const decide = (
    request: CheckRequest,
    info: SubscriptionInfo,
    plan: GatePlan,
  ): SubscriptionOutcome | Promise<SubscriptionOutcome> => {
    if (info.status !== "Active") {
      const why = {
        Paused: "is paused: resume it to use it again",
        Cancelled: "is cancelled",
        PastDue: "is past due: its last renewal could not be charged",
      }[info.status];
      return refuse("SubscriptionNotActive", `subscription ${request.subscriptionId} ${why}`);
    }
    if (isRenewalOverdue(info, options.renewalGraceSeconds)) {
      return refuse("SubscriptionNotActive", renewalOverdueMessage(info));
    }
    const units = unitsOf(request.route, plan, request.routeRequest);
    if (units > 0 && plan.overageUnitPrice > 0n && metering?.flusher === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        `paymentGate subscription pricing: plan ${plan.planId} charges overage, so the gate needs \`providerApiKey\` to settle it`,
        { details: { reason: "gate_misconfigured" } },
      );
    }
    if (units === 0 || metering === undefined) return pass(info, units, undefined, 0n);
    const { ledger, maxUnsettled } = metering;
    if (ledger.reserveNow !== undefined) {
      const reservation = ledger.reserveNow(usageRequest(info, plan, units, maxUnsettled));
      return reservation.ok
        ? pass(info, units, reservation.unitsUsed, reservation.charge)
        : refused(request.subscriptionId, info, plan, units, reservation);
    }
    return reserve(info, plan, units, ledger, maxUnsettled).then((reservation) =>
      reservation.ok
        ? pass(info, units, reservation.unitsUsed, reservation.charge)
        : refused(request.subscriptionId, info, plan, units, reservation),
    );
  };

  /** A metered use the ledger refused: at the cap, the state is read again once before refusing. */
  const refused = async (
    subscriptionId: string,
    info: SubscriptionInfo,
    plan: GatePlan,
    units: number,
    first: Reservation & { ok: false },
  ): Promise<SubscriptionOutcome> => {
    const { ledger, maxUnsettled, flusher, retryAfterSeconds } = metering as NonNullable<typeof metering>;
    let reservation: Reservation = first;
    if (first.reason === "AllowanceExhausted" && plan.overageUnitPrice > 0n) {
      // The subscriber may have just raised its cap (or renewed): read the chain again before refusing.
      const fresh = await statuses.get(subscriptionId, { maxAgeMs: EXHAUSTED_REFRESH_MS });
      if (
        fresh !== undefined &&
        fresh !== info &&
        fresh.status === "Active" &&
        !isRenewalOverdue(fresh, options.renewalGraceSeconds)
      ) {
        info = fresh;
        reservation = await reserve(info, plan, units, ledger, maxUnsettled);
      }
    }
    if (reservation.ok) return pass(info, units, reservation.unitsUsed, reservation.charge);
    if (reservation.reason === "ExposureLimit") {
      void flusher?.flush().then(() => flusher.reconcile());
      return {
        kind: "busy",
        message: "this API's metered usage awaiting settlement is at its limit; retry shortly",
        retryAfter: retryAfterSeconds,
      };
    }
    if (reservation.reason === "Leased") {
      return { kind: "busy", message: LEASED_MESSAGE, retryAfter: 1 };
    }
    return refuse("AllowanceExhausted", exhausted(info, plan, reservation.unitsUsed, reservation.charge));
  };

  /** The path that may wait: a token to recover, a state or a plan to read. */
  const checkReading = async (request: CheckRequest, token: string): Promise<SubscriptionOutcome> => {
    const { subscriptionId, route } = request;
    const verdict = await verifier.verify(token, subscriptionId);
    if (!verdict.ok) return refuse("SubscriptionAuthInvalid", `subscription auth refused: ${verdict.reason}`);

    const info = await statuses.get(subscriptionId);
    if (info === undefined) {
      // A token for an id that does not exist is a stranger's: it keeps no slot in the token cache.
      verifier.forget(token);
      return refuse("SubscriptionNotActive", `subscription ${subscriptionId} does not exist`);
    }
    if (!sameAddress(info.subscriber, verdict.signer)) {
      // Not the subscriber's own key: the subscriber may be a wallet that this key signs for.
      if (
        options.walletSubAuth === undefined ||
        !(await options.walletSubAuth(info.subscriber, token, verdict.signer))
      ) {
        verifier.forget(token);
        return refuse(
          "SubscriptionAuthInvalid",
          `the token is not signed by subscription ${subscriptionId}'s subscriber`,
        );
      }
      verifier.vouch(token, info.subscriber);
    }
    if (!covers(route, info)) {
      return refuse(
        "PaymentRequired",
        `subscription ${subscriptionId} is to plan ${info.planId}, which does not cover this resource (plans here: ${route.offers.map((offer) => offer.planId).join(", ")})`,
      );
    }
    // The plan is this route's; reading it through the catalog also proves it is this gate's own.
    return decide(request, info, await plans.get(info.planId));
  };

  /** Whether the subscription is sold by this gate under one of the route's plans. */
  const covers = (route: SubscriptionRoute, info: SubscriptionInfo): boolean => {
    if (!sameAddress(info.provider, payTo)) return false;
    const offers = route.offers;
    for (let i = 0; i < offers.length; i++) if (offers[i]?.planId === info.planId) return true;
    return false;
  };

  return {
    check(request) {
      startBackground();
      const { subscriptionId, token } = request;
      // Ids under 16 digits (every id a chain hands out for years) are checked without the schema.
      if (!SHORT_ID.test(subscriptionId) && !SubscriptionIdSchema.safeParse(subscriptionId).success) {
        return refuse("SubscriptionAuthInvalid", "X-Tollgate-Sub must be a subscription id in decimal");
      }
      if (token === null || token === "") {
        return refuse(
          "SubscriptionAuthInvalid",
          "X-Tollgate-Sub-Auth is missing: a subscription id alone is not a credential; sign a sub-auth token",
        );
      }
      // Steady use: the token's signer, the state and the plan all cached and matching, so nothing is
      // awaited. Anything else (a first use, a refusal) takes the path that reads and explains.
      const verdict = verifier.accepted(token, subscriptionId);
      const info = verdict === undefined ? undefined : statuses.cached(subscriptionId)?.state;
      if (
        verdict !== undefined &&
        info !== undefined &&
        sameAddress(info.subscriber, verdict.signer) &&
        covers(request.route, info)
      ) {
        const plan = plans.peek(info.planId);
        if (plan !== undefined) return decide(request, info, plan);
      }
      return checkReading(request, token);
    },
    async deduct(subscriptionId, amount) {
      if (metering?.flusher === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          "paymentGate subscription pricing: deductAllowance needs `providerApiKey`, with which charges are settled",
          { details: { reason: "gate_misconfigured" } },
        );
      }
      const id = subscriptionId.toString();
      let info = await statuses.get(id);
      if (
        info === undefined ||
        info.status !== "Active" ||
        isRenewalOverdue(info, options.renewalGraceSeconds)
      ) {
        throw new TollgateError("SubscriptionNotActive", `subscription ${id} is not active`, {
          details: { subscriptionId: id },
        });
      }
      const plan = await plans.get(info.planId);
      const { ledger, maxUnsettled } = metering;
      let reservation = await reserve(info, plan, 0, ledger, maxUnsettled, amount);
      if (!reservation.ok && reservation.reason === "AllowanceExhausted") {
        // As for metered use: the cap may have just been raised; read the chain again before refusing.
        const fresh = await statuses.get(id, { maxAgeMs: EXHAUSTED_REFRESH_MS });
        if (fresh !== undefined && fresh !== info && fresh.status === "Active") {
          info = fresh;
          reservation = await reserve(info, plan, 0, ledger, maxUnsettled, amount);
        }
      }
      if (reservation.ok) return { subscriptionId, amount };
      if (reservation.reason === "ExposureLimit") {
        const flusher = metering.flusher;
        void flusher.flush().then(() => flusher.reconcile());
        throw new TollgateError(
          "RateLimited",
          "this API's metered usage awaiting settlement is at its limit; retry shortly",
          { retryAfter: metering.retryAfterSeconds },
        );
      }
      if (reservation.reason === "Leased") {
        throw new TollgateError("RateLimited", LEASED_MESSAGE, { retryAfter: 1 });
      }
      throw new TollgateError("AllowanceExhausted", exhausted(info, plan, reservation.unitsUsed, amount), {
        details: {
          subscriptionId: id,
          amount: amount.toString(),
          available: reservation.available.toString(),
        },
      });
    },
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
