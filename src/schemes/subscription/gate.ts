/**
 * The gate part of `subscription` (docs/protocol.md, "Subscription requests"): `{ type: "subscription", plan }` entries become
 * plan offers whose terms are read from the facilitator (`GET /plans/:id`) for the 402; a request
 * carrying `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` is served under the subscription, metered when
 * its plan meters (`createSubscriptionGate` holds the checks, the usage ledger and the event feed).
 * `metered` entries compile to offers of this part.
 */

import type { Address, PublicClient } from "viem";
import { z } from "zod";
import type { GateLogger } from "../../gate/gateLogger.ts";
import { GatePass } from "../../gate/gatePass.ts";
import { checkFailureResponse, errorResponse, misconfigured } from "../../gate/gateResponses.ts";
import {
  atomicPriceOf,
  type Price,
  parseGateOptions,
  SubscriptionPricingSchema,
} from "../../gate/paymentGateOptions.ts";
import { RouteRequestView } from "../../gate/requestView.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { HeaderName } from "../../protocol/header.ts";
import { McpMetaKey, type McpSubscriptionCredential } from "../../protocol/mcpPayment.ts";
import { optionTermsOf, type Pricing } from "../../protocol/pricing.ts";
import type {
  GateScheme,
  GateSchemeContext,
  GateSchemePart,
  SchemeAcceptance,
  SchemeOfferEntry,
  SchemeRequest,
} from "../types.ts";
import { createPlanCatalog, type GatePlan, type PlanCatalog } from "./gate/createPlanCatalog.ts";
import {
  createSubscriptionGate,
  type GateSubscription,
  type SubscriptionGate,
  type SubscriptionOutcome,
} from "./gate/createSubscriptionGate.ts";
import { deductionAmount, type SubscriptionServed } from "./gate/deductAllowance.ts";
import { createMemoryUsageLedger } from "./gate/usage/createMemoryUsageLedger.ts";
import { createUsageFlusher } from "./gate/usage/createUsageFlusher.ts";
import type { UsageLedger } from "./gate/usage/usageLedger.ts";
import { createWalletSubAuthCheck } from "./gate/walletSubAuth.ts";

/** A plan that covers a route, by id (canonical decimal); its terms are read when a 402 is built. */
export type PlanOffer = { scheme: "subscription"; planId: string };

/** A plan as the one pricing type: `subscription`, with its metering terms (docs/protocol.md, "402 body"). */
export function planPricing(plan: GatePlan): Pricing {
  return {
    type: "subscription",
    planId: plan.planId,
    amount: plan.amount,
    interval: plan.interval,
    includedUnits: plan.includedUnits,
    overageUnitPrice: plan.overageUnitPrice,
    manager: plan.manager,
    ...(plan.deprecated && plan.successorPlanId !== undefined
      ? { successorPlanId: plan.successorPlanId }
      : {}),
  };
}

/**
 * A plan that covers a route with its terms as the chain has them, resolved by its caller
 * (`composePaymentRequired`; docs/protocol.md, "402 body").
 */
export type SubscriptionOffer = {
  scheme: "subscription";
  planId: string;
  /** Price per period, smallest unit. */
  amount: bigint;
  /** Period in whole seconds. */
  interval: number;
  /** The SubscriptionManager running the plan. */
  manager: Address;
  /** Metered terms, when the plan includes units or prices overage. */
  overage?: { unitPrice: bigint; includedUnits: bigint } | undefined;
  /** Set when the plan is deprecated: the plan new subscribers should take. */
  successorPlanId?: string | undefined;
};

/** The `accepts` entry of a resolved plan, through the one pricing type's wire conversion. */
export function planEntry(offer: SubscriptionOffer): SchemeOfferEntry {
  const terms = optionTermsOf({
    type: "subscription",
    planId: offer.planId,
    amount: offer.amount,
    interval: offer.interval,
    includedUnits: offer.overage?.includedUnits ?? 0n,
    overageUnitPrice: offer.overage?.unitPrice ?? 0n,
    manager: offer.manager,
    ...(offer.successorPlanId === undefined ? {} : { successorPlanId: offer.successorPlanId }),
  });
  return { scheme: "subscription", amount: terms.amount, tollgate: terms.tollgate };
}

declare module "../types.ts" {
  interface SchemeGateOptions {
    /** Counts metered use. Default: in memory, for one process; `createPostgresUsageLedger` for several. */
    usageLedger?: UsageLedger | undefined;
  }
}

/** The gate option this part checks itself (the gate passes it through, `SchemeGateOptions`). */
const UsageLedgerOptionSchema = z.object({
  usageLedger: z
    .custom<UsageLedger>(
      (value) =>
        typeof value === "object" &&
        value !== null &&
        ["reserve", "claimBatch", "markBatchSent", "resolve"].every(
          (name) => typeof (value as Record<string, unknown>)[name] === "function",
        ),
      { error: "expected a UsageLedger" },
    )
    .optional(),
});

/** The settings of the gate options this part reads (checked by `PaymentGateOptionsSchema`). */
type SubscriptionSettings = {
  subscriptionManager?: Address;
  subscriptionStatusTtlMs?: number;
  subscriptionRenewalGraceSeconds?: number;
  subscriptionEventPollMs?: number;
  providerApiKey?: string;
  maxUnsettledUsage?: Price;
  usageFlushIntervalMs?: number;
  chainClient?: Pick<PublicClient, "request">;
};

/**
 * Compiles a plan reference (`{ type: "subscription" | "metered", plan }`) into a plan offer. A plan
 * needs `publicOrigin`, the audience sub-auth tokens must name.
 */
export function compilePlan(entry: { plan?: unknown }, context: GateSchemeContext, where: string): PlanOffer {
  if (context.publicOrigin === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `paymentGate options: ${where}: subscription pricing needs \`publicOrigin\`, the audience sub-auth tokens must name`,
    );
  }
  const ref = entry.plan as string | bigint | { planId: string | bigint };
  const id = typeof ref === "object" ? ref.planId : ref;
  return { scheme: "subscription", planId: id.toString() };
}

export const subscriptionGate: GateSchemePart<PlanOffer, SubscriptionOffer> = {
  pricingTypes: ["subscription"],
  create: createSubscriptionPart,
  entryOf: planEntry,
  // Over MCP `_meta["tollgate/subscription"]` is `{ id, auth }`: the two headers of an HTTP call.
  mcp: {
    credentials: {
      [McpMetaKey.TollgateSubscription]: (value) => {
        const { id, auth } = value as McpSubscriptionCredential;
        return { [HeaderName.Subscription]: id, [HeaderName.SubscriptionAuth]: auth };
      },
    },
  },
};

function createSubscriptionPart(context: GateSchemeContext): GateScheme<PlanOffer> {
  const { clock, facilitator, logger } = context;
  const settings = context.options as SubscriptionSettings;
  const { usageLedger } = parseGateOptions(UsageLedgerOptionSchema, context.options, "paymentGate options");
  const plans: PlanCatalog = createPlanCatalog({
    facilitator,
    payTo: context.payTo,
    network: context.network,
    token: context.token,
    clock,
    manager: settings.subscriptionManager,
  });
  const maxUnsettled = atomicPriceOf(
    settings.maxUnsettledUsage ?? "10",
    context.decimals,
    "maxUnsettledUsage",
  );

  // Built on first use: its background work (event feed, usage flushes) starts with its first request.
  let subscriptions: SubscriptionGate | undefined;
  const service = (): SubscriptionGate => {
    subscriptions ??= subscriptionGateOf(context, settings, { plans, usageLedger, maxUnsettled });
    return subscriptions;
  };
  const checkFault = (fault: unknown): SchemeAcceptance => ({
    kind: "respond",
    response: checkFailureResponse(fault, "a subscription could not be checked", logger),
  });
  const acceptance = (outcome: SubscriptionOutcome, request: SchemeRequest): SchemeAcceptance =>
    acceptanceOf(outcome, request, logger, service);

  return {
    compile(entry, where) {
      const parsed = parseGateOptions(SubscriptionPricingSchema, entry, `paymentGate options: ${where}`);
      return compilePlan(parsed, context, where);
    },
    async offer(offer) {
      const terms = optionTermsOf(planPricing(await plans.get(offer.planId)));
      return { scheme: "subscription", amount: terms.amount, tollgate: terms.tollgate };
    },
    credential: (request) => request.headers.get(HeaderName.Subscription),
    accept(subscriptionId, request, route) {
      let outcome: ReturnType<SubscriptionGate["check"]>;
      try {
        outcome = service().check({
          subscriptionId,
          token: request.headers.get(HeaderName.SubscriptionAuth),
          route: request.units === undefined ? route : { offers: route.offers, units: request.units },
          // The URL is read (and built) only by a `units` function that asks for it.
          routeRequest: new RouteRequestView(request),
        });
      } catch (fault) {
        return checkFault(fault);
      }
      // A subscriber in steady use is answered from the caches, without a promise.
      return outcome instanceof Promise
        ? outcome.then((settled) => acceptance(settled, request), checkFault)
        : acceptance(outcome, request);
    },
    async ready(offers) {
      await Promise.all(offers.map((offer) => plans.get(offer.planId)));
    },
    syncEvents: async () => {
      await subscriptions?.syncEvents();
    },
    flushUsage: async () => (subscriptions === undefined ? 0 : subscriptions.flushUsage()),
    close: async () => {
      await subscriptions?.close();
    },
  };
}

/**
 * The subscription checks of one gate, with its usage ledger and flusher. Throws `misconfigured`
 * without `publicOrigin`: `compilePlan` refuses plans without it, but a routes function may still
 * return one.
 */
function subscriptionGateOf(
  context: GateSchemeContext,
  settings: SubscriptionSettings,
  built: { plans: PlanCatalog; usageLedger: UsageLedger | undefined; maxUnsettled: bigint },
): SubscriptionGate {
  const { clock, facilitator } = context;
  const logger = context.logger as GateLogger | undefined;
  if (context.publicOrigin === undefined) {
    throw misconfigured("subscription pricing needs `publicOrigin`, the audience of sub-auth tokens");
  }
  const ledger = built.usageLedger ?? createMemoryUsageLedger({ clock });
  const flushMs = settings.usageFlushIntervalMs ?? 2_000;
  return createSubscriptionGate({
    facilitator,
    plans: built.plans,
    payTo: context.payTo,
    audience: context.publicOrigin,
    clock,
    decimals: context.decimals,
    statusTtlMs: settings.subscriptionStatusTtlMs ?? 5_000,
    renewalGraceSeconds: settings.subscriptionRenewalGraceSeconds ?? 300,
    eventPollMs: settings.subscriptionEventPollMs ?? 1_000,
    providerApiKey: settings.providerApiKey,
    ...(settings.chainClient === undefined
      ? {}
      : { walletSubAuth: createWalletSubAuthCheck({ client: settings.chainClient, clock }) }),
    metering: {
      ledger,
      flusher:
        settings.providerApiKey === undefined
          ? undefined
          : createUsageFlusher({
              ledger,
              facilitator,
              apiKey: settings.providerApiKey,
              intervalMs: flushMs,
              logger,
            }),
      maxUnsettled: built.maxUnsettled,
      retryAfterSeconds: Math.max(1, Math.ceil(flushMs / 1000) + 1),
    },
    logger,
  });
}

/** The part's answer to a checked subscription: served, busy (429) or refused (a fresh 402). */
function acceptanceOf(
  outcome: SubscriptionOutcome,
  request: SchemeRequest,
  logger: GateSchemeContext["logger"],
  service: () => SubscriptionGate,
): SchemeAcceptance {
  // A metered charge reserved for a failed request is not handed back: the usage ledger has no
  // way to undo a reservation that a flush may already have batched (see docs/gate.md).
  if (outcome.kind === "pass") {
    // The subscriber learns what this metered request counted and was charged, so its own ledger
    // can record it (docs/protocol.md). Only the token's signer, the subscriber, gets this answer.
    const counted = outcome.subscription.units > 0 && outcome.subscription.unitsUsed !== undefined;
    return new GatePass(
      counted
        ? [
            [HeaderName.Units, outcome.subscription.units.toString()],
            [HeaderName.OverageCharge, outcome.subscription.charge.toString()],
          ]
        : undefined,
      undefined,
      served(outcome.subscription, service),
    );
  }
  if (outcome.kind === "busy") {
    return {
      kind: "respond",
      response: errorResponse("RateLimited", outcome.message, 429, outcome.retryAfter),
    };
  }
  logger?.debug({ method: request.method, path: request.path, error: outcome.error }, "subscription refused");
  return { kind: "refuse", error: outcome.error, message: outcome.message };
}

/** The subscription as handlers read it, with `deductAllowance` bound to it. */
function served(subscription: GateSubscription, service: () => SubscriptionGate): SubscriptionServed {
  return {
    subscriptionId: subscription.subscriptionId,
    subscriber: subscription.subscriber,
    planId: subscription.planId,
    units: subscription.units,
    unitsUsed: subscription.unitsUsed,
    charge: subscription.charge,
    deductAllowance: deductFrom(subscription.subscriptionId, service),
  };
}

/** Charges against one subscription's allowance (`ServedSubscription.deductAllowance`). */
function deductFrom(
  subscriptionId: bigint,
  service: () => SubscriptionGate,
): SubscriptionServed["deductAllowance"] {
  // Returned, not named: built per served request, so no name is attached to it at run time.
  return async (amount) => service().deduct(subscriptionId, deductionAmount(amount));
}
