/**
 * An agent's subscriptions, kept in its store and inside its budget (docs/budgets.md, "Subscriptions").
 *
 * - `ensure(plan)` returns the wallet's subscription to a plan, subscribing only when none is held:
 *   the store's claim (one live row per wallet and plan) makes a second process, a restart or a second
 *   agent on the same wallet reuse it; a claim left by a process that died between subscribing and
 *   recording is reconciled from the chain (`GET /subscribers/:address`) before anyone subscribes again.
 * - A plan that renews more often than the keeper looks (`minIntervalSeconds`, the watcher's period)
 *   is refused before anything is signed: its renewals would outrun every look.
 * - A subscribe reserves the first period (checked against every limit, the commitment ceiling and the
 *   approval hook), places a standing hold for what the subscription can still take (this period's
 *   overage cap, and the next renewal with its cap when the budget has room: subscriptionCommitment.ts)
 *   and approves the manager for exactly that, plus what the wallet's other subscriptions in the plan's token still hold.
 * - The subscribe signs a spend limit equal to the first period plus the hold: the manager refuses any
 *   pull past it, so the approval the wallet's subscriptions share never pays one subscription out of
 *   another's share. Whenever the hold grows (the next renewal, a cap raise) the limit is raised to
 *   match (a relayed, subscriber-signed SetSpendLimit): on chain, a subscription can take at most what
 *   the budget has committed to it, before any look of the keeper.
 * - `sync()` reads what each subscription has pulled on chain and records it in the ledger from its hold
 *   (idempotently: the ledger keeps the running total per subscription). A subscription that took more
 *   than its hold is paused (relayed, subscriber-signed) and reported; one that was cancelled or whose
 *   renewal failed is ended and its hold released. When a renewal has used the approval, the hold is
 *   grown back to the next renewal and its cap and the approval topped up to match (a relayed permit,
 *   `POST /subscriptions/approval`), so a subscription the budget holds renews period after period.
 *
 * Invariant: for each subscription, chain pulls ≤ spend limit ≤ first period + charged + held (what
 * the budget committed to it), and ledger spend = first period + max(estimates, chain pulls − first
 * period); so nothing moves that the limits did not allow, whenever the keeper looks.
 */
import { randomUUID } from "node:crypto";
import { holdRefOf } from "./agentSubscriptionRecords.ts";
import { createEnsureSubscription } from "./ensureSubscription.ts";
import { createKeeperContext } from "./keeperContext.ts";
import { createRaiseCap } from "./raiseCap.ts";
import { createRenewalHolds } from "./renewalHolds.ts";
import { createSubscribeClaimed } from "./subscribeClaimed.ts";
import { createSubscriptionClaims } from "./subscriptionClaims.ts";
import { createSubscriptionEndings } from "./subscriptionEndings.ts";
import type { SubscriptionKeeper, SubscriptionKeeperOptions } from "./subscriptionKeeperTypes.ts";
import { syncSubscriptions } from "./syncSubscriptions.ts";
import { createWalletApproval } from "./walletApproval.ts";

export type {
  EnsuredSubscription,
  EnsureRequest,
  KeeperPayer,
  SubscriptionAlert,
  SubscriptionKeeper,
  SubscriptionKeeperOptions,
  SyncedSubscription,
} from "./subscriptionKeeperTypes.ts";

const DEFAULT_STALE_MS = 180_000;
const DEFAULT_MIN_INTERVAL_SECONDS = 60;

/**
 * Composes the keeper from its parts: the shared context with the wallet's turn (keeperContext.ts),
 * endings and alerts (subscriptionEndings.ts), the approval and spend limits (walletApproval.ts), the
 * holds kept at the next renewal (renewalHolds.ts), the claim and subscribe of `ensure`
 * (subscriptionClaims.ts, subscribeClaimed.ts, ensureSubscription.ts), the look of `sync`
 * (syncSubscriptions.ts) and cap raises (raiseCap.ts).
 * @example
 * const keeper = createSubscriptionKeeper({ agent: "researcher", payer, budget, chain: publicClient });
 * const { subscriptionId } = await keeper.ensure({ planId: "3", desiredCap: 20_000n });
 * await keeper.sync(); // renewals and deductions into the ledger
 */
export function createSubscriptionKeeper(options: SubscriptionKeeperOptions): SubscriptionKeeper {
  const ctx = createKeeperContext(options);
  const { agent, payer, budget } = ctx;
  const endings = createSubscriptionEndings(ctx, options.onAlert);
  const approval = createWalletApproval(ctx);
  const holds = createRenewalHolds(ctx, endings, approval);
  const claims = createSubscriptionClaims(ctx, {
    staleMs: options.claimStaleAfterMs ?? DEFAULT_STALE_MS,
    wait: options.wait ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))),
    createId: options.createId ?? randomUUID,
  });
  const subscribeClaimed = createSubscribeClaimed(
    ctx,
    holds,
    options.minIntervalSeconds ?? DEFAULT_MIN_INTERVAL_SECONDS,
  );

  return {
    ensure: createEnsureSubscription(
      ctx,
      { endings, claims, subscribeClaimed },
      options.claimStaleAfterMs ?? DEFAULT_STALE_MS,
    ),

    sync: () => syncSubscriptions({ ctx, endings, approval, holds }, options.chain),

    find: ctx.find,

    async chargeUsage(subscriptionId, amount) {
      if (amount <= 0n) return true;
      const record = await ctx.find(subscriptionId);
      if (record === undefined) return false;
      await budget.charge(agent, { ref: holdRefOf(record.id), kind: "metered", amount });
      return true;
    },

    raiseCap: createRaiseCap(ctx, { approval, holds }),

    async cancel(subscriptionId, reason) {
      const record = await ctx.find(subscriptionId);
      await ctx.inTurn(() => payer.cancel(subscriptionId));
      if (record !== undefined) {
        await endings.end(record, "ended", reason);
        endings.alert(record, "cancelled", reason);
      }
    },
  };
}
