/**
 * The gasless subscribe: the plan, the intent's deadline and the subscriber's balance checked, the
 * permit relayed first when the allowance is short or the subscriber asks for another value, then
 * `subscribeFor` relayed (subscriptionRelays.ts), each simulated before it is sent.
 */
import type { Address, Hash } from "viem";
import type { RelayedCall } from "../../../chain/actions/relayedCall.ts";
import { subscribeForRelay } from "../../../chain/actions/subscriptions/subscribeForRelay.ts";
import { permitRelay } from "../../../chain/actions/usd/permitRelay.ts";
import { getSubscriptionIdFromReceipt } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { NO_SPEND_LIMIT } from "../../../chain/signers/eip712Types.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscribeRequest, SubscribeResponse } from "../../../protocol/subscriptions.ts";
import {
  assertServedToken,
  catchUp,
  chainTime,
  readPlan,
  type ServiceDeps,
  simulate,
  subscriptionInfo,
  tokenRead,
} from "./serviceReads.ts";
import type { PlanRow } from "./subscriptionRecords.ts";
import { relay } from "./subscriptionRelays.ts";

export async function relayedSubscribe(
  deps: ServiceDeps,
  request: SubscribeRequest,
): Promise<SubscribeResponse> {
  const planId = BigInt(request.planId);
  const subscriber = request.subscriber;
  const subscribeCall = subscribeForRelay({
    manager: deps.manager,
    subscriber,
    planId,
    maxOverage: BigInt(request.maxOverage),
    spendLimit: request.spendLimit === undefined ? NO_SPEND_LIMIT : BigInt(request.spendLimit),
    deadline: BigInt(request.deadline),
    signature: request.signature,
  });

  return relay<SubscribeResponse, { permitTransaction?: Hash }>(deps, "subscribe", subscriber, request, {
    async prepare() {
      const plan = await readPlan(deps, planId);
      assertServedToken(deps, plan);
      assertCurrentPlan(plan, request);
      const now = await chainTime(deps);
      if (BigInt(request.deadline) <= BigInt(now)) {
        throw new TollgateError(
          "AuthorizationExpired",
          "the subscribe intent's deadline has passed on chain",
          {
            details: { deadline: request.deadline, chainTime: now },
          },
        );
      }
      const permitTransaction = await permitIfNeeded(deps, request, plan, subscribeCall, now);
      await simulate(deps, subscribeCall);
      return {
        call: { to: subscribeCall.to, data: subscribeCall.data },
        context: permitTransaction === undefined ? {} : { permitTransaction },
      };
    },
    async finish(receipt, context) {
      const subscriptionId = getSubscriptionIdFromReceipt(receipt);
      await catchUp(deps);
      return {
        subscriptionId: subscriptionId.toString(),
        transaction: receipt.transactionHash,
        ...(context?.permitTransaction === undefined ? {} : { permitTransaction: context.permitTransaction }),
        subscription: await subscriptionInfo(deps, subscriptionId),
      };
    },
  });
}

/** Refuses a deprecated plan, naming its successor if it has one. */
function assertCurrentPlan(plan: PlanRow, request: SubscribeRequest): void {
  if (!plan.deprecated) return;
  const successor =
    plan.successor_plan_id === null || plan.successor_plan_id === 0n
      ? null
      : plan.successor_plan_id.toString();
  throw new TollgateError(
    "PlanDeprecated",
    successor === null
      ? "the plan is deprecated"
      : `the plan is deprecated; subscribe to plan ${successor} instead`,
    { details: { planId: request.planId, successorPlanId: successor } },
  );
}

/**
 * Checks the subscriber's balance; relays its permit (and waits for it) when one is needed. A permit
 * replaces the allowance: submitted when the allowance is short, and also when the subscriber asks for
 * another value (an agent's budget approves exactly what it holds; skipping it would let this
 * subscribe spend the approval held for the wallet's other renewals).
 */
async function permitIfNeeded(
  deps: ServiceDeps,
  request: SubscribeRequest,
  plan: PlanRow,
  subscribeCall: RelayedCall,
  now: number,
): Promise<Hash | undefined> {
  const subscriber = request.subscriber;
  const token = plan.token as Address;
  const [balance, allowance] = await Promise.all([
    tokenRead(deps, token, "balanceOf", subscriber),
    tokenRead(deps, token, "allowance", subscriber, deps.manager),
  ]);
  if (balance < plan.amount) {
    throw new TollgateError("InsufficientFunds", "the subscriber's balance is below the plan's price", {
      details: { balance: balance.toString(), required: plan.amount.toString() },
    });
  }
  const resets = request.permit !== undefined && BigInt(request.permit.value) !== allowance;
  if (!(allowance < plan.amount || resets)) return undefined;
  const permit = request.permit;
  if (permit === undefined) {
    throw new TollgateError(
      "InsufficientFunds",
      "the SubscriptionManager may not pull the plan's price: send a permit or approve it first",
      { details: { reason: "allowance", allowance: allowance.toString(), required: plan.amount.toString() } },
    );
  }
  if (BigInt(permit.value) < plan.amount) {
    throw new TollgateError("AmountMismatch", "the permit's value is below the plan's price", {
      details: { value: permit.value, required: plan.amount.toString() },
    });
  }
  if (BigInt(permit.deadline) <= BigInt(now)) {
    throw new TollgateError("AuthorizationExpired", "the permit's deadline has passed on chain", {
      details: { deadline: permit.deadline, chainTime: now },
    });
  }
  // The intent's own checks (deadline, signature, plan) come before the pull in subscribeFor, so a
  // simulation now refuses a bad intent before the permit is spent; only the transfer may still fail,
  // for want of the approval the permit gives.
  try {
    await simulate(deps, subscribeCall);
  } catch (error) {
    if (!(error instanceof TollgateError && error.code === "InsufficientFunds")) throw error;
  }
  const permitCall = permitRelay({
    token,
    owner: subscriber,
    spender: deps.manager,
    value: BigInt(permit.value),
    deadline: BigInt(permit.deadline),
    signature: permit.signature,
  });
  await simulate(deps, permitCall);
  const sent = await deps.ctx.gas.sendAndWait({ to: permitCall.to, data: permitCall.data });
  return sent.hash;
}
