/**
 * The subscription plans a gate sells (docs/protocol.md, "402 body"; docs/gate.md), read from the facilitator's `GET /plans/:id`
 * once and cached. A plan must be the gate's own: sold by its `payTo`, in its token. A plan that is not
 * is a misconfiguration, reported with a message naming both addresses, and never offered in a 402.
 *
 * Invariants:
 * - A plan's terms (price, interval, token, metering) never change on chain, so they are cached for
 *   the gate's life; only `deprecated`/`successorPlanId` change, and `invalidate` (driven by the
 *   facilitator's `plan.deprecated` event) drops the entry so the next use reads it again.
 * - Concurrent first uses of one plan share one request.
 * - A transient failure (facilitator unreachable) is not cached: the next use asks again. A
 *   misconfiguration is remembered for `MISCONFIGURED_RETRY_MS`, so a gate keeps answering with the
 *   same clear error instead of asking the facilitator on every request.
 * - A plan the facilitator answers `NotFound` for is not a misconfiguration: a facilitator that just
 *   restarted, or whose chain node came back without the latest blocks, may not see a plan that exists.
 *   It is `ChainUnavailable` (503, `Retry-After`, `details.reason: "plan_unavailable"`), remembered for
 *   `UNAVAILABLE_RETRY_MS` so a burst of calls asks once, and logged by the gate; never a 500.
 */
import type { Address } from "viem";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import type { Network } from "../../../protocol/network.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import { getPlanInfo } from "../client/facilitatorSubscriptions.ts";

/** A plan as the gate sells it: terms in bigint, plus the SubscriptionManager that runs it. */
export type GatePlan = {
  planId: string;
  provider: Address;
  token: Address;
  /** Price per period, smallest unit. */
  amount: bigint;
  /** Period length in seconds. */
  interval: number;
  /** Units per period included in the price (metered routes). */
  includedUnits: bigint;
  /** Price of each unit past the included ones, smallest unit; 0 = no overage (a hard limit). */
  overageUnitPrice: bigint;
  deprecated: boolean;
  successorPlanId: string | undefined;
  manager: Address;
};

export type PlanCatalog = {
  /** The plan, read once. Throws `InvalidRequest` for a plan that is not the gate's, or the facilitator's fault. */
  get(planId: string): Promise<GatePlan>;
  /** The plan if already cached (hot path, no I/O). */
  peek(planId: string): GatePlan | undefined;
  /** Forgets a plan so the next `get` reads it again (after `plan.deprecated`). */
  invalidate(planId: string): void;
};

export type PlanCatalogOptions = {
  facilitator: Pick<FacilitatorClient, "request" | "supported">;
  payTo: Address;
  network: Network;
  token: Address;
  clock: Clock;
  /** The SubscriptionManager; read from the facilitator's `/supported` when absent. */
  manager?: Address | undefined;
};

/** How long a misconfigured plan is answered from memory before the facilitator is asked again. */
const MISCONFIGURED_RETRY_MS = 30_000;
/** How long a plan the facilitator did not find is answered 503 from memory before it is asked again. */
const UNAVAILABLE_RETRY_MS = 2_000;
/** `Retry-After` of a plan the facilitator did not find (seconds). */
const UNAVAILABLE_RETRY_AFTER = 5;

/** What reading one plan needs: where to ask, what the plan must match, and the manager's address. */
type PlanSource = {
  facilitator: Pick<FacilitatorClient, "request">;
  payTo: Address;
  token: Address;
  managerAddress: () => Promise<Address>;
};

/** A failed read remembered for a while, with when it happened (clock milliseconds). */
type RememberedFailure = { error: TollgateError; at: number };

export function createPlanCatalog(options: PlanCatalogOptions): PlanCatalog {
  const { facilitator, payTo, token, clock } = options;
  const plans = new Map<string, GatePlan>();
  const loading = new Map<string, Promise<GatePlan>>();
  const misconfigured = new Map<string, RememberedFailure>();
  const unavailable = new Map<string, RememberedFailure>();
  const source: PlanSource = {
    facilitator,
    payTo,
    token,
    managerAddress: createManagerLookup(facilitator, options.network, options.manager),
  };

  return {
    peek: (planId) => plans.get(planId),
    invalidate(planId) {
      plans.delete(planId);
      misconfigured.delete(planId);
      unavailable.delete(planId);
    },
    get(planId) {
      const cached = plans.get(planId);
      if (cached !== undefined) return Promise.resolve(cached);
      const failed = misconfigured.get(planId);
      if (failed !== undefined && clock.now() - failed.at < MISCONFIGURED_RETRY_MS) {
        return Promise.reject(failed.error);
      }
      const missing = unavailable.get(planId);
      if (missing !== undefined && clock.now() - missing.at < UNAVAILABLE_RETRY_MS) {
        return Promise.reject(missing.error);
      }
      let pending = loading.get(planId);
      if (pending === undefined) {
        pending = loadPlan(source, planId)
          .then(
            (plan) => {
              plans.set(planId, plan);
              misconfigured.delete(planId);
              unavailable.delete(planId);
              return plan;
            },
            (error: unknown) => {
              if (isTollgateError(error, "InvalidRequest"))
                misconfigured.set(planId, { error, at: clock.now() });
              if (isTollgateError(error, "ChainUnavailable") && error.details?.reason === "plan_unavailable")
                unavailable.set(planId, { error, at: clock.now() });
              throw error;
            },
          )
          .finally(() => loading.delete(planId));
        loading.set(planId, pending);
      }
      return pending;
    },
  };
}

/**
 * The SubscriptionManager's address: `known` when given, else read once from the facilitator's
 * `/supported`. A failed read is forgotten so the next use asks again; a network without a manager
 * stays an error, as the answer will not change.
 */
function createManagerLookup(
  facilitator: Pick<FacilitatorClient, "supported">,
  network: Network,
  known: Address | undefined,
): () => Promise<Address> {
  let manager: Promise<Address> | undefined = known === undefined ? undefined : Promise.resolve(known);
  return () => {
    manager ??= facilitator.supported().then(
      (supported) => {
        const found = supported.networks.find((n) => n.network === network)?.subscriptionManager;
        if (found === undefined) {
          throw misconfiguration(
            `the facilitator offers no SubscriptionManager on ${network}, so this gate cannot sell subscriptions`,
          );
        }
        return found;
      },
      (error: unknown) => {
        manager = undefined;
        throw error;
      },
    );
    return manager;
  };
}

/** Reads one plan and checks it is the gate's own (its `payTo`, its token). */
async function loadPlan(source: PlanSource, planId: string): Promise<GatePlan> {
  const info = await readPlanInfo(source.facilitator, planId);
  if (!sameAddress(info.provider, source.payTo)) {
    throw misconfiguration(
      `plan ${planId} is sold by ${info.provider}, not by this gate's payTo ${source.payTo}: its renewals would not pay this API`,
    );
  }
  if (!sameAddress(info.token, source.token)) {
    throw misconfiguration(
      `plan ${planId} is priced in token ${info.token}, not in this gate's token ${source.token}`,
    );
  }
  return {
    planId: info.planId,
    provider: info.provider,
    token: info.token,
    amount: BigInt(info.amount),
    interval: info.interval,
    includedUnits: BigInt(info.includedUnits),
    overageUnitPrice: BigInt(info.overageUnitPrice),
    deprecated: info.deprecated,
    successorPlanId: info.successorPlanId ?? undefined,
    manager: await source.managerAddress(),
  };
}

/** The facilitator's plan, a `NotFound` turned into a retryable `ChainUnavailable` (see the header). */
async function readPlanInfo(
  facilitator: Pick<FacilitatorClient, "request">,
  planId: string,
): Promise<PlanInfo> {
  try {
    return await getPlanInfo(facilitator, planId);
  } catch (error) {
    if (isTollgateError(error, "NotFound")) {
      throw new TollgateError(
        "ChainUnavailable",
        `subscription plan ${planId} is not visible to the facilitator yet; try again shortly`,
        { retryAfter: UNAVAILABLE_RETRY_AFTER, details: { reason: "plan_unavailable", planId } },
      );
    }
    throw error;
  }
}

function misconfiguration(message: string): TollgateError {
  return new TollgateError("InvalidRequest", `paymentGate subscription pricing: ${message}`, {
    details: { reason: "gate_misconfigured" },
  });
}
