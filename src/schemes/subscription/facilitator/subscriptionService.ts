/**
 * The relayed subscription API behind the HTTP routes: gasless subscribe (permit, then subscribeFor)
 * and the subscriber-signed lifecycle calls (pauseFor, resumeFor, cancelFor, setMaxOverageFor), plus
 * the reads a payer needs (plans, subscriptions, its own nonces).
 *
 * Every relayed call is simulated with the manager's ABI before it is sent, so a refusal comes back
 * as a precise code (docs/protocol.md, "Errors") and costs no gas. Only plans in a token this facilitator serves
 * are relayed (422 `UnsupportedToken` otherwise, before anything is sent): anyone may create a plan in
 * any token, and the keeper never renews those, so their gas would be spent on
 * subscriptions nobody collects. Relays are idempotent on the signed request:
 * a retry (say, after a timeout) gets the first attempt's result rather than an `InvalidSignature`
 * for the intent nonce the first attempt used.
 */
import type { Address } from "viem";
import type {
  ApprovalRequest,
  ApprovalResponse,
  PlanInfo,
  SetMaxOverageRequest,
  SetSpendLimitRequest,
  SubscribeRequest,
  SubscribeResponse,
  SubscriberInfo,
  SubscriptionAction,
  SubscriptionActionRequest,
  SubscriptionActionResponse,
  SubscriptionInfo,
} from "../../../protocol/subscriptions.ts";
import { relayedAction } from "./relayedAction.ts";
import { relayedApproval } from "./relayedApproval.ts";
import { relayedSubscribe } from "./relayedSubscribe.ts";
import {
  readPlan,
  type ServiceContext,
  type ServiceDeps,
  subscriberInfo,
  subscriptionInfo,
} from "./serviceReads.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexerTypes.ts";
import { planToWire } from "./subscriptionRecords.ts";

export type SubscriptionService = {
  getPlan(planId: bigint): Promise<PlanInfo>;
  getSubscription(subscriptionId: bigint): Promise<SubscriptionInfo>;
  getSubscriber(subscriber: Address, token?: Address): Promise<SubscriberInfo>;
  subscribe(request: SubscribeRequest): Promise<SubscribeResponse>;
  /** Relays an owner-signed permit for the manager (a top-up of the allowance renewals are pulled from). */
  approve(request: ApprovalRequest): Promise<ApprovalResponse>;
  act(
    subscriptionId: bigint,
    action: SubscriptionAction,
    request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
  ): Promise<SubscriptionActionResponse>;
};

/**
 * Composes the service: its chain reads (serviceReads.ts), idempotent relays (subscriptionRelays.ts),
 * the subscribe (relayedSubscribe.ts), the approval top-up (relayedApproval.ts) and the lifecycle
 * calls (relayedAction.ts).
 */
export function createSubscriptionService(
  ctx: ServiceContext,
  deps: {
    indexer: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    /** Relayed calls one subscriber may have the facilitator pay for per hour (default 30). */
    maxRelaysPerHour?: number | undefined;
  },
): SubscriptionService {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the subscription service needs a SubscriptionManager address");
  }
  const manager: Address = ctx.subscriptionManager;
  const service: ServiceDeps = {
    ctx,
    client: ctx.publicClient,
    manager,
    scope: { chainId: ctx.chainId, manager },
    log: ctx.logger.child({ component: "subscriptions" }),
    indexer: deps.indexer,
    maxRelaysPerHour: deps.maxRelaysPerHour ?? 30,
    servedTokens: new Set(ctx.tokens.map((token) => token.address.toLowerCase())),
  };
  return {
    async getPlan(planId: bigint): Promise<PlanInfo> {
      return planToWire(await readPlan(service, planId));
    },
    getSubscription: (subscriptionId: bigint): Promise<SubscriptionInfo> =>
      subscriptionInfo(service, subscriptionId),
    getSubscriber: (subscriber: Address, token?: Address): Promise<SubscriberInfo> =>
      subscriberInfo(service, subscriber, token),
    subscribe: (request: SubscribeRequest): Promise<SubscribeResponse> => relayedSubscribe(service, request),
    approve: (request: ApprovalRequest): Promise<ApprovalResponse> => relayedApproval(service, request),
    act: (
      subscriptionId: bigint,
      action: SubscriptionAction,
      request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
    ): Promise<SubscriptionActionResponse> => relayedAction(service, subscriptionId, action, request),
  };
}
