/**
 * `ensure(plan)`: the wallet's subscription to a plan, subscribing only when none is held. Concurrent
 * calls of a process share one subscribe; a stored subscription the chain no longer holds live is ended
 * and taken out anew; otherwise a claim is taken (subscriptionClaims.ts) and the subscribe made under it.
 */
import { getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import {
  type AgentSubscriptionRecord,
  dropClaim,
  findLiveSubscription,
  type PlanKey,
} from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";
import { isSubscribeRefusal, type SubscribeClaimed } from "./subscribeClaimed.ts";
import type { SubscriptionClaims } from "./subscriptionClaims.ts";
import type { SubscriptionEndings } from "./subscriptionEndings.ts";
import type { EnsuredSubscription, EnsureRequest } from "./subscriptionKeeperTypes.ts";

export function createEnsureSubscription(
  ctx: KeeperContext,
  parts: { endings: SubscriptionEndings; claims: SubscriptionClaims; subscribeClaimed: SubscribeClaimed },
  staleMs: number,
): (request: EnsureRequest) => Promise<EnsuredSubscription> {
  const { agent, payer, store, clock } = ctx;
  const { endings, claims, subscribeClaimed } = parts;
  /** Subscribes in flight in this process, by plan: concurrent calls share one. */
  const ensuring = new Map<string, Promise<EnsuredSubscription>>();

  /**
   * Once per process and plan (the payer's book serves later calls): a subscription cancelled
   * elsewhere (the policy, the seller, another process) or past due is ended, and taken out anew.
   */
  const keepOrEnd = async (live: AgentSubscriptionRecord, subscriptionId: bigint) => {
    const info = await getSubscriptionInfo(payer.facilitator, subscriptionId);
    if (info.status === "Active" || info.status === "Paused") {
      return { subscriptionId, created: false, record: live };
    }
    if (info.status === "PastDue") {
      // Cancelled on chain too: a later approval must not let it renew.
      await ctx
        .inTurn(() => payer.cancel(subscriptionId))
        .catch((error: unknown) => {
          ctx.logger?.warn({ agent, err: error }, "could not cancel a past-due subscription");
        });
    }
    await endings.end(live, "ended", `found ${info.status} on chain`);
    return undefined;
  };

  const subscribeUnder = async (claimId: string, request: EnsureRequest, key: PlanKey) => {
    const plan = await ctx.planInfo(request.planId);
    try {
      const subscriptionId = await subscribeClaimed(
        claimId,
        plan,
        request.desiredCap ?? 0n,
        request.provider ?? plan.provider,
      );
      const record = (await findLiveSubscription(store, key))!;
      return { subscriptionId, created: true, record };
    } catch (error) {
      if (!isSubscribeRefusal(error)) throw error;
      await dropClaim(store, claimId);
      throw error;
    }
  };

  const ensureOnce = async (request: EnsureRequest): Promise<EnsuredSubscription> => {
    const key = { subscriber: payer.address, manager: await ctx.manager(), planId: request.planId };
    const deadline = clock.now() + staleMs + 30_000;
    for (;;) {
      const live = await findLiveSubscription(store, key);
      if (live !== undefined && live.subscriptionId !== undefined) {
        const kept = await keepOrEnd(live, live.subscriptionId);
        if (kept !== undefined) return kept;
        continue;
      }
      const claim =
        live === undefined
          ? await claims.claimAnew(request, key)
          : await claims.takeOver(request, key, live, deadline);
      if (claim === undefined) continue;
      if ("ensured" in claim) return claim.ensured;
      return subscribeUnder(claim.claimId, request, key);
    }
  };

  return (request) => {
    const key = request.planId;
    let pending = ensuring.get(key);
    if (pending === undefined) {
      pending = ensureOnce(request).finally(() => ensuring.delete(key));
      ensuring.set(key, pending);
      return pending;
    }
    // Joined another call's subscribe: for this call nothing new was charged.
    return pending.then((ensured) => ({ ...ensured, created: false }));
  };
}
