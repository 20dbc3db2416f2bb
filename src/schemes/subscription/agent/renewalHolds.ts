/**
 * Each Active subscription's hold grown to its next renewal, or the subscription paused before the
 * wallet's shared approval could fund a renewal the budget does not hold.
 */
import type { Address } from "viem";
import { isTollgateError } from "../../../protocol/errors.ts";
import { getSubscriberInfo, getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import {
  type AgentSubscriptionRecord,
  holdRefOf,
  listLiveSubscriptions,
  otherHoldsOfWallet,
} from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";
import type { SubscriptionEndings } from "./subscriptionEndings.ts";
import type { WalletApproval } from "./walletApproval.ts";

export type RenewalHolds = {
  /**
   * Keeps the hold of an Active subscription at what it can take before the next look: the rest of
   * this period's cap, the next renewal and its cap. When the budget cannot hold that and the wallet's
   * approval could let it renew, pauses it: true. The approval is one per token, shared by the
   * wallet's subscriptions: it could fund this renewal when it already exceeds this hold, when other
   * subscriptions hold in the token (the look's top-up raises the approval to their holds), or when
   * the caller is about to raise it (`approvalRises`: a subscribe or a cap raise). Only a lone
   * subscription whose approval is no larger than its hold is left to the chain, which refuses the
   * renewal. `pause` is the caller's when it already holds the wallet's turn.
   */
  coverNextRenewal(
    record: AgentSubscriptionRecord,
    price: bigint,
    held: bigint,
    how?: { approvalRises?: boolean; pause?: (id: bigint) => Promise<unknown> },
  ): Promise<boolean>;
  /**
   * Before the wallet's approval over `token` grows (a subscribe, a cap raise), pauses this agent's
   * Active subscriptions in the token whose next renewal the budget cannot hold: the larger approval
   * would otherwise fund their renewal out of what it holds for another subscription. Runs in the
   * wallet's turn (pauses directly).
   */
  pauseUnheldBeforeApproval(token: string, exceptId: string): Promise<void>;
};

export function createRenewalHolds(
  ctx: KeeperContext,
  endings: SubscriptionEndings,
  approval: Pick<WalletApproval, "boundOnChain">,
): RenewalHolds {
  const { agent, payer, budget, store } = ctx;

  /** Whether the wallet's approval could let this subscription renew beyond its own hold. */
  const approvalCouldRenew = async (record: AgentSubscriptionRecord, token: Address, held: bigint) => {
    const subscriber = await getSubscriberInfo(payer.facilitator, payer.address, { token });
    const allowance = BigInt(subscriber.token?.allowance ?? "0");
    const others = await otherHoldsOfWallet(store, {
      subscriber: payer.address,
      manager: await ctx.manager(),
      token,
      exceptId: record.id,
    });
    return !(allowance <= held && others === 0n);
  };

  const coverNextRenewal: RenewalHolds["coverNextRenewal"] = async (record, price, held, how = {}) => {
    const id = record.subscriptionId!;
    const info = await getSubscriptionInfo(payer.facilitator, id);
    if (info.status !== "Active") return false;
    const cap = BigInt(info.maxOverage);
    const used = BigInt(info.overageUsed);
    const need = (cap > used ? cap - used : 0n) + price + cap;
    if (held >= need) return false;
    try {
      await budget.hold(agent, {
        ref: holdRefOf(record.id),
        provider: record.provider as Address,
        amount: need - held,
      });
      // What is held now may be pulled: the limit follows (in the caller's turn when it holds one).
      await approval.boundOnChain(record, how.pause !== undefined);
      return false;
    } catch (error) {
      if (!isTollgateError(error, "BudgetExceeded") && !isTollgateError(error, "ApprovalDenied")) throw error;
    }
    if (how.approvalRises !== true && !(await approvalCouldRenew(record, info.token, held))) return false;
    const reason = "the budget cannot hold its next renewal, and the wallet's approval could let it renew";
    await (how.pause ?? ((subscriptionId: bigint) => ctx.inTurn(() => payer.pause(subscriptionId))))(id);
    await endings.end(record, "paused", reason);
    endings.alert(record, "paused", reason);
    return true;
  };

  return {
    coverNextRenewal,

    async pauseUnheldBeforeApproval(token, exceptId) {
      for (const record of await listLiveSubscriptions(store, agent)) {
        if (record.id === exceptId || record.status !== "active" || record.subscriptionId === undefined)
          continue;
        const plan = await ctx.planInfo(record.planId);
        if (plan.token.toLowerCase() !== token.toLowerCase()) continue;
        const held = (await budget.getHold(agent, holdRefOf(record.id)))?.held ?? 0n;
        await coverNextRenewal(record, BigInt(plan.amount), held, {
          approvalRises: true,
          pause: (id) => payer.pause(id),
        });
      }
    },
  };
}
