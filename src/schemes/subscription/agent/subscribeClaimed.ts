/**
 * A subscribe under a claim this process owns: the first period reserved and the hold placed in the
 * budget first, then, in the wallet's turn, the subscribe signed with a spend limit of exactly that
 * commitment and an approval of it plus the wallet's other holds in the token, and the claim recorded
 * as active. A refusal (nothing moved) gives the reservation, the hold and the claim back; any other
 * failure (a timeout may hide a subscribe that went through) leaves the claim and its hold for the
 * next `ensure` to reconcile from the chain.
 */
import type { Address } from "viem";
import type { Reservation } from "../../../agent/budget/createBudgetLedger.ts";
import { formatUnitsExact } from "../../../protocol/amount.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import {
  activateSubscription,
  dropClaim,
  holdRefOf,
  otherHoldsOfWallet,
} from "./agentSubscriptionRecords.ts";
import { holdRoom } from "./holdRoom.ts";
import type { KeeperContext } from "./keeperContext.ts";
import type { RenewalHolds } from "./renewalHolds.ts";
import { type SubscriptionCommitment, subscriptionCommitment } from "./subscriptionCommitment.ts";

/** Codes that say the subscribe did not happen (nothing moved on chain). */
const REFUSED = new Set([
  "PlanDeprecated",
  "NotFound",
  "InsufficientFunds",
  "InvalidRequest",
  "InvalidSignature",
  "UnsupportedNetwork",
  "UnsupportedToken",
  "BudgetExceeded",
  "ApprovalDenied",
]);

/** Whether `error` says the subscribe did not happen (nothing moved on chain). */
export function isSubscribeRefusal(error: unknown): boolean {
  return isTollgateError(error) && REFUSED.has(error.code);
}

export type SubscribeClaimed = (
  claimId: string,
  plan: PlanInfo,
  desiredCap: bigint,
  provider: Address,
) => Promise<bigint>;

/** Refuses a plan the budget cannot commit to; reserves its first period and places its hold. */
async function reserveCommitment(
  ctx: KeeperContext,
  minInterval: number,
  claimId: string,
  plan: PlanInfo,
  desiredCap: bigint,
  provider: Address,
) {
  const { agent, budget } = ctx;
  const ref = holdRefOf(claimId);
  const price = BigInt(plan.amount);
  if (plan.interval < minInterval) {
    throw new TollgateError(
      "BudgetExceeded",
      `plan ${plan.planId} renews every ${plan.interval} s, more often than the budget's keeper looks (every ${minInterval} s)`,
      { details: { agent, planId: plan.planId, provider, interval: plan.interval, minInterval } },
    );
  }
  const report = await budget.report(agent);
  const commitment = subscriptionCommitment({
    price,
    desiredCap,
    overageUnitPrice: BigInt(plan.overageUnitPrice),
    room: holdRoom(report, provider),
  });
  if (commitment === undefined) {
    throw new TollgateError(
      "BudgetExceeded",
      `the budget has no room for plan ${plan.planId}'s first period (${formatUnitsExact(price)} USDC)`,
      { details: { agent, planId: plan.planId, provider, requested: price.toString() } },
    );
  }
  // One approval question for the whole commitment: the first period and the hold placed next.
  const reservation = await budget.reserve(agent, {
    amount: price,
    provider,
    kind: "subscription",
    ref,
    ttlSeconds: 900,
    withHold: commitment.hold,
  });
  try {
    await budget.hold(agent, { ref, provider, amount: commitment.hold });
  } catch (error) {
    await budget.release(reservation);
    throw error;
  }
  return { commitment, reservation };
}

/**
 * In the wallet's turn from reading the other holds to recording this one as active: the nonces
 * signed and the approval (every hold of the wallet) are not raced by another subscribe.
 */
function subscribeInTurn(
  ctx: KeeperContext,
  holds: Pick<RenewalHolds, "pauseUnheldBeforeApproval">,
  claimId: string,
  plan: PlanInfo,
  commitment: SubscriptionCommitment,
  reservation: Reservation,
) {
  const { agent, payer, budget, store } = ctx;
  return ctx.inTurn(async () => {
    await holds.pauseUnheldBeforeApproval(plan.token, claimId);
    const others = await otherHoldsOfWallet(store, {
      subscriber: payer.address,
      manager: await ctx.manager(),
      token: plan.token,
      exceptId: claimId,
    });
    let subscriptionId: bigint;
    try {
      subscriptionId = await payer.subscribe({
        planId: plan.planId,
        maxOverage: commitment.cap,
        // Everything the budget committed to it (the first period and the hold): the manager pulls
        // no more for this subscription, whatever the shared approval allows.
        spendLimit: commitment.approval,
        approval: commitment.approval + others,
        exactApproval: true,
      });
    } catch (error) {
      await budget.release(reservation);
      // Refused: nothing moved. Anything else (a timeout) may hide a subscribe that went through: the
      // claim and its hold stay, and the next `ensure` reconciles them from the chain once stale.
      if (isSubscribeRefusal(error)) {
        await budget.releaseHold(agent, holdRefOf(claimId));
        await dropClaim(store, claimId);
      }
      throw error;
    }
    await budget.commit(reservation, BigInt(plan.amount));
    await activateSubscription(store, claimId, {
      subscriptionId,
      recordedFirst: BigInt(plan.amount),
      now: ctx.now(),
      note: `cap ${formatUnitsExact(commitment.cap)}; ${commitment.renews ? "next renewal held" : "one period held"}`,
    });
    return { subscriptionId, approval: commitment.approval + others };
  });
}

export function createSubscribeClaimed(
  ctx: KeeperContext,
  holds: Pick<RenewalHolds, "pauseUnheldBeforeApproval">,
  minInterval: number,
): SubscribeClaimed {
  const { agent } = ctx;

  return async (claimId, plan, desiredCap, provider) => {
    const { commitment, reservation } = await reserveCommitment(
      ctx,
      minInterval,
      claimId,
      plan,
      desiredCap,
      provider,
    );
    const { subscriptionId, approval } = await subscribeInTurn(
      ctx,
      holds,
      claimId,
      plan,
      commitment,
      reservation,
    );
    ctx.logger?.info(
      {
        agent,
        planId: plan.planId,
        subscriptionId: subscriptionId.toString(),
        maxOverage: commitment.cap.toString(),
        hold: commitment.hold.toString(),
        approval: approval.toString(),
        renews: commitment.renews,
      },
      "subscribed within the budget",
    );
    return subscriptionId;
  };
}
