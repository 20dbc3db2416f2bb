/**
 * `sync()`: one look at the agent's subscriptions. What each pulled on chain is recorded in the ledger
 * from its hold; one cancelled on chain is ended, one that took more than its hold is paused (or, when
 * that fails, cancelled), one whose renewal failed is cancelled, and one that goes on has its hold grown
 * to the next renewal and its spend limit raised to match; last, each token's approval is topped up to
 * what the holds and the unpulled ledger spend come to. One-time payments whose answer was lost are
 * read back first.
 */
import type { Address } from "viem";
import type { ChargeOutcome } from "../../../agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../../../agent/budget/pendingPayments.ts";
import type { ReadClient } from "../../../chain/clientTypes.ts";
import { formatUnitsExact } from "../../../protocol/amount.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import {
  type AgentSubscriptionRecord,
  holdRefOf,
  listLiveSubscriptions,
  setSubscriptionToken,
} from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";
import { readSubscriptionPulls, type SubscriptionPulls } from "./readSubscriptionPulls.ts";
import type { RenewalHolds } from "./renewalHolds.ts";
import type { SubscriptionEndings } from "./subscriptionEndings.ts";
import type { SubscriptionKeeperOptions, SyncedSubscription } from "./subscriptionKeeperTypes.ts";
import type { WalletApproval } from "./walletApproval.ts";

type Chain = NonNullable<SubscriptionKeeperOptions["chain"]>;
type Action = SyncedSubscription["action"];

type SyncParts = {
  ctx: KeeperContext;
  endings: SubscriptionEndings;
  approval: WalletApproval;
  holds: RenewalHolds;
};

/** One-time payments whose /authorize answer was lost (src/agent/budget/pendingPayments.ts). */
async function readBackPayments(ctx: KeeperContext, chain: Chain) {
  const { agent, payer, budget } = ctx;
  if (typeof payer.payment !== "function") return;
  const reader = { address: payer.address, payment: payer.payment.bind(payer) };
  const reads = chain.readContract === undefined ? undefined : (chain as ReadClient);
  await resolvePendingPayments({ agent, budget, payer: reader, clock: ctx.clock, chain: reads }).catch(
    (error: unknown) => ctx.logger?.warn({ err: error }, "pending payments not read back"),
  );
}

/** A subscription that took more than its hold: paused, or cancelled when the pause cannot be relayed. */
async function stopOverdrawn(
  { ctx, endings }: SyncParts,
  record: AgentSubscriptionRecord,
  id: bigint,
  beyondHold: bigint,
): Promise<Action> {
  const reason = `the seller took ${formatUnitsExact(beyondHold)} USDC more than the budget held for it`;
  let action: Action;
  try {
    await ctx.inTurn(() => ctx.payer.pause(id));
    await endings.end(record, "paused", reason);
    action = "paused";
  } catch (error) {
    ctx.logger?.warn(
      { agent: ctx.agent, err: error },
      "could not pause an overdrawn subscription; cancelling",
    );
    await ctx.inTurn(() => ctx.payer.cancel(id));
    await endings.end(record, "ended", reason);
    action = "cancelled";
  }
  endings.alert(record, action === "paused" ? "paused" : "cancelled", reason, beyondHold);
  return action;
}

/** Its renewal failed (the approval the budget gave is used up): it serves nothing any more. */
async function cancelPastDue({ ctx, endings }: SyncParts, record: AgentSubscriptionRecord, id: bigint) {
  const reason = "its renewal failed: the approval the budget gave is used up";
  try {
    await ctx.inTurn(() => ctx.payer.cancel(id));
  } catch (error) {
    ctx.logger?.warn({ agent: ctx.agent, err: error }, "could not cancel a past-due subscription");
  }
  await endings.end(record, "ended", reason);
  endings.alert(record, "cancelled", reason);
  return "cancelled" as const;
}

/** What this look does to the subscription, given what the chain pulled and the ledger charged. */
async function settle(
  parts: SyncParts,
  record: AgentSubscriptionRecord,
  id: bigint,
  plan: PlanInfo,
  pulls: SubscriptionPulls,
  charged: ChargeOutcome,
): Promise<Action> {
  if (pulls.cancelled) {
    await parts.endings.end(record, "ended", "cancelled on chain");
    parts.endings.alert(record, "ended", "cancelled on chain");
    return "ended";
  }
  if (charged.beyondHold > 0n && record.status === "active")
    return stopOverdrawn(parts, record, id, charged.beyondHold);
  if (pulls.pastDue) return cancelPastDue(parts, record, id);
  if (
    record.status === "active" &&
    (await parts.holds.coverNextRenewal(record, BigInt(plan.amount), charged.held))
  ) {
    return "paused";
  }
  return "none";
}

/** Syncs one subscription; adds what its ledger recorded but the chain has not pulled to `pendingByToken`. */
async function syncOne(
  parts: SyncParts,
  chain: Chain,
  record: AgentSubscriptionRecord,
  id: bigint,
  pendingByToken: Map<string, bigint>,
): Promise<SyncedSubscription> {
  const { ctx } = parts;
  const plan = await ctx.planInfo(record.planId);
  const token = plan.token.toLowerCase();
  if (record.token === undefined) await setSubscriptionToken(ctx.store, record.id, token);
  const pulls = await readSubscriptionPulls(chain, {
    manager: record.manager as Address,
    subscriptionId: id,
    fromBlock: record.fromBlock,
  });
  const beyondFirst = pulls.total > record.recordedFirst ? pulls.total - record.recordedFirst : 0n;
  const charged = await ctx.budget.charge(ctx.agent, {
    ref: holdRefOf(record.id),
    kind: "subscription",
    total: beyondFirst,
  });
  const action = await settle(parts, record, id, plan, pulls, charged);
  if (action === "none" && record.status === "active") await parts.approval.boundOnChain(record);
  if (action === "none") {
    const pending = charged.charged > beyondFirst ? charged.charged - beyondFirst : 0n;
    pendingByToken.set(token, (pendingByToken.get(token) ?? 0n) + pending);
  }
  return {
    subscriptionId: id,
    planId: record.planId,
    pulled: pulls.total,
    recorded: charged.amount,
    beyondHold: charged.beyondHold,
    action,
  };
}

/** One look at every live subscription of the agent (see above); `chain` as the keeper's options have it now. */
export async function syncSubscriptions(
  parts: SyncParts,
  chain: SubscriptionKeeperOptions["chain"],
): Promise<SyncedSubscription[]> {
  const { ctx } = parts;
  if (chain === undefined) {
    throw new TollgateError("InvalidRequest", "watching subscriptions needs a chain client (an RPC)");
  }
  // Read back on each look too: a long-running agent resolves them without a next call.
  await readBackPayments(ctx, chain);
  const out: SyncedSubscription[] = [];
  /** Per token of a subscription that goes on: recorded in the ledger, not pulled on chain yet. */
  const pendingByToken = new Map<string, bigint>();
  for (const record of await listLiveSubscriptions(ctx.store, ctx.agent)) {
    if (record.subscriptionId === undefined) continue;
    out.push(await syncOne(parts, chain, record, record.subscriptionId, pendingByToken));
  }
  await parts.approval.topUpApproval(pendingByToken);
  return out;
}
