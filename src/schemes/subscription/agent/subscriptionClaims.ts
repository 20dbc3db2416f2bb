/**
 * The store's claim on a plan for a wallet (one live row per wallet and plan), taken before anyone
 * subscribes: a fresh claim, or the stale claim of a process that died. Before either, the chain is
 * asked whether the wallet holds the plan already; if so the subscription is adopted into the claim
 * instead of taken out again.
 */
import type { Address } from "viem";
import { TollgateError } from "../../../protocol/errors.ts";
import {
  type AgentSubscriptionRecord,
  activateSubscription,
  claimSubscription,
  findLiveSubscription,
  holdRefOf,
  type PlanKey,
  renewClaim,
} from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";
import type { EnsuredSubscription, EnsureRequest } from "./subscriptionKeeperTypes.ts";

const CLAIM_POLL_MS = 250;

/** What a claim attempt came to: a subscription held already, a claim to subscribe under, or another look. */
export type ClaimOutcome = { ensured: EnsuredSubscription } | { claimId: string } | undefined;

export type SubscriptionClaims = {
  /**
   * Another process's claim: waits for it to finish (another look), unless it is stale (its process
   * died); then adopts what that process subscribed to, or takes the claim over.
   */
  takeOver(
    request: EnsureRequest,
    key: PlanKey,
    live: AgentSubscriptionRecord,
    deadline: number,
  ): Promise<ClaimOutcome>;
  /** No live row: claims the plan, adopting the wallet's subscription on chain if it holds one. */
  claimAnew(request: EnsureRequest, key: PlanKey): Promise<ClaimOutcome>;
};

/** Takes a subscription found on chain into the store; its pulls from `fromBlock` on go to this agent. */
async function adopt(
  ctx: KeeperContext,
  claimId: string,
  subscriptionId: bigint,
  fromBlock: bigint,
  provider: Address,
  why: string,
) {
  const { agent, budget, store } = ctx;
  await budget.hold(agent, { ref: holdRefOf(claimId), provider, amount: 0n });
  await activateSubscription(store, claimId, {
    subscriptionId,
    recordedFirst: 0n,
    fromBlock,
    now: ctx.now(),
    note: why,
  });
  ctx.logger?.info(
    { agent, subscriptionId: subscriptionId.toString(), why },
    "subscription adopted from the chain",
  );
}

async function adopted(ctx: KeeperContext, key: PlanKey, subscriptionId: bigint): Promise<ClaimOutcome> {
  const record = (await findLiveSubscription(ctx.store, key))!;
  return { ensured: { subscriptionId, created: false, record } };
}

export function createSubscriptionClaims(
  ctx: KeeperContext,
  how: { staleMs: number; wait: (ms: number) => Promise<void>; createId: () => string },
): SubscriptionClaims {
  const { agent, store, clock } = ctx;
  return {
    async takeOver(request, key, live, deadline) {
      const staleBefore = new Date(clock.now() - how.staleMs);
      if (live.claimedAt.getTime() >= staleBefore.getTime()) {
        if (clock.now() > deadline) {
          throw new TollgateError(
            "InvalidRequest",
            `plan ${request.planId} is being subscribed to by another process`,
            {
              details: { planId: request.planId, reason: "subscription_claimed" },
            },
          );
        }
        await how.wait(CLAIM_POLL_MS);
        return undefined;
      }
      const held = await ctx.onChain(request.planId);
      if (held !== undefined) {
        const plan = await ctx.planInfo(request.planId);
        await adopt(
          ctx,
          live.id,
          held,
          live.fromBlock,
          plan.provider,
          "a claim whose process stopped after subscribing",
        );
        return adopted(ctx, key, held);
      }
      if (!(await renewClaim(store, live.id, staleBefore, ctx.now()))) return undefined;
      return { claimId: live.id };
    },

    async claimAnew(request, key) {
      // Another store (or another agent) may hold the plan on this wallet: the chain says.
      const held = await ctx.onChain(request.planId);
      const plan = await ctx.planInfo(request.planId);
      const id = how.createId();
      const fromBlock = await ctx.currentBlock();
      const provider = request.provider ?? plan.provider;
      const claimed = await claimSubscription(store, {
        ...key,
        id,
        agent,
        provider,
        token: plan.token,
        fromBlock,
        now: ctx.now(),
      });
      if (!claimed) return undefined;
      if (held !== undefined) {
        await adopt(ctx, id, held, fromBlock, provider, "held on chain by this wallet already");
        return adopted(ctx, key, held);
      }
      return { claimId: id };
    },
  };
}
