/**
 * The subscriber-signed lifecycle calls (pauseFor, resumeFor, cancelFor, setMaxOverageFor,
 * setSpendLimitFor) relayed (subscriptionRelays.ts), each simulated before it is sent.
 */
import { subscriptionActionForRelay } from "../../../chain/actions/subscriptions/subscriptionActionForRelay.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type {
  SetMaxOverageRequest,
  SetSpendLimitRequest,
  SubscriptionAction,
  SubscriptionActionRequest,
  SubscriptionActionResponse,
} from "../../../protocol/subscriptions.ts";
import {
  assertServedToken,
  catchUp,
  chainTime,
  readPlan,
  readSubscription,
  type ServiceDeps,
  simulate,
  subscriptionInfo,
} from "./serviceReads.ts";
import { relay } from "./subscriptionRelays.ts";

export async function relayedAction(
  deps: ServiceDeps,
  subscriptionId: bigint,
  action: SubscriptionAction,
  request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
): Promise<SubscriptionActionResponse> {
  const sub = await readSubscription(deps, subscriptionId);
  const deadline = BigInt(request.deadline);
  const common = { manager: deps.manager, subscriptionId, deadline, signature: request.signature };
  const call = subscriptionActionForRelay(
    action === "overage"
      ? { ...common, action, maxOverage: BigInt((request as SetMaxOverageRequest).maxOverage) }
      : action === "limit"
        ? { ...common, action, spendLimit: BigInt((request as SetSpendLimitRequest).spendLimit) }
        : { ...common, action },
  );
  return relay<SubscriptionActionResponse, undefined>(
    deps,
    action,
    sub.subscriber,
    { subscriptionId: subscriptionId.toString(), request },
    {
      async prepare() {
        assertServedToken(deps, await readPlan(deps, sub.planId));
        const now = await chainTime(deps);
        if (deadline <= BigInt(now)) {
          throw new TollgateError("AuthorizationExpired", "the intent's deadline has passed on chain", {
            details: { deadline: request.deadline, chainTime: now },
          });
        }
        await simulate(deps, call);
        return { call: { to: call.to, data: call.data }, context: undefined };
      },
      async finish(receipt) {
        await catchUp(deps);
        return {
          subscriptionId: subscriptionId.toString(),
          action,
          transaction: receipt.transactionHash,
          subscription: await subscriptionInfo(deps, subscriptionId),
        };
      },
    },
  );
}
