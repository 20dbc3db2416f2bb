/**
 * A cap raise of an Active subscription: held in the budget first (up to `max(includedUnits, 10)`
 * units' worth, less when the budget has less room), then, in the wallet's turn, the approval grown by
 * as much, the spend limit raised to the hold and the new cap set.
 */
import type { Address } from "viem";
import { isTollgateError } from "../../../protocol/errors.ts";
import { getSubscriberInfo, getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import { holdRefOf } from "./agentSubscriptionRecords.ts";
import { holdRoom } from "./holdRoom.ts";
import type { KeeperContext } from "./keeperContext.ts";
import type { RenewalHolds } from "./renewalHolds.ts";
import type { SubscriptionKeeper } from "./subscriptionKeeperTypes.ts";
import type { WalletApproval } from "./walletApproval.ts";

export function createRaiseCap(
  ctx: KeeperContext,
  parts: { approval: WalletApproval; holds: Pick<RenewalHolds, "pauseUnheldBeforeApproval"> },
): SubscriptionKeeper["raiseCap"] {
  const { agent, payer, budget } = ctx;
  const { approval, holds } = parts;

  return async (subscriptionId, plan) => {
    const record = await ctx.find(subscriptionId);
    if (record === undefined || record.status !== "active" || plan.overageUnitPrice === 0n) return undefined;
    const info = await getSubscriptionInfo(payer.facilitator, subscriptionId);
    if (info.status !== "Active") return undefined;
    let step = plan.overageUnitPrice * BigInt(Math.max(plan.includedUnits, 10));
    const room = holdRoom(await budget.report(agent), record.provider);
    if (room !== undefined && room < step) step = room;
    if (step < plan.overageUnitPrice) return undefined;
    try {
      await budget.hold(agent, {
        ref: holdRefOf(record.id),
        provider: record.provider as Address,
        amount: step,
      });
    } catch (error) {
      if (isTollgateError(error, "BudgetExceeded") || isTollgateError(error, "ApprovalDenied"))
        return undefined;
      throw error;
    }
    // The raise is held: the approval may grow by as much (it stays within what the budget holds),
    // read and set in the wallet's turn so no other action of the wallet moves it in between.
    const maxOverage = BigInt(info.maxOverage) + step;
    await ctx.inTurn(async () => {
      await holds.pauseUnheldBeforeApproval(info.token, record.id);
      const wallet = await getSubscriberInfo(payer.facilitator, payer.address, { token: info.token });
      await approval.approve(
        info.token as Address,
        BigInt(wallet.token?.allowance ?? "0") + step,
        "cap raised",
      );
      await approval.boundOnChain(record, true);
      await payer.setMaxOverage(subscriptionId, maxOverage);
    });
    return { maxOverage };
  };
}
